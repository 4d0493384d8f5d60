"""Prompts: the built-in sets (bench, demo, soak, the held-out tau curve), the one reader of
prompt files (`read_conversations`) and the one tokenizer of conversations (`chat_ids`, the
target's own chat template), used by bench, regen, evaluation and the demo alike.

Built-in sets (the demo task suite, held-out seeds: neither the target's, the drafter's nor the
tests' data):
  arith, sort, convert, record, code   one task family each (the Table 1-style columns)
  tasks                                 the four non-code families mixed
  chat                                  chat-like: two earlier user/assistant turns from other
                                        families, then a new question (longer, mixed context)
  free                                  freely phrased requests written by hand, in no task
                                        template (the demo drafter's hard case: tau near 1)
  freechat                              multi-turn chats written by hand: earlier turns, then a
                                        follow-up (for real targets such as SmolLM2)
A file gives a custom set: NAME=PATH, PATH a .jsonl of {"prompt": str} or {"messages": [...]}
lines, or a text file with one prompt per line (the way to benchmark a real target).
"""

from __future__ import annotations

import json
import random

from .config import DFlashConfigError
from .training.tasks import FAMILIES, make_samples

BUILTIN = (*FAMILIES, "tasks", "chat", "free", "freechat")

# Written for the benchmark, not generated from training/tasks.py: the kind of thing people type.
FREE = (
    "hey, what's 12 plus 30?",
    "Can you tell me a bit about yourself?",
    "I have three cats and my neighbour has two dogs. How many pets is that altogether?",
    "Write a haiku about the sea.",
    "Which is bigger, 0.5 or 0.45? Explain briefly.",
    "What should I cook tonight if I only have eggs, rice and an onion?",
    "please sort these for me: banana, apple, cherry",
    "How far is it from Paris to Rome, roughly?",
    "Explain what a list is in Python to a child.",
    "My train leaves at 7:40 and the trip takes 95 minutes. When do I arrive?",
    "Give me three tips for sleeping better.",
    "Translate 'good morning' into Spanish and French.",
    "what is the capital of Peru",
    "Summarise the plot of Romeo and Juliet in two sentences.",
    "Is 91 a prime number?",
    "Write a short, polite email declining a meeting on Friday.",
    "How many minutes are there in a week?",
    "Tell me a joke about computers.",
    "Why is the sky blue?",
    "I'm 1.8 metres tall. How much is that in feet?",
    "List some fruits that are red.",
    "Could you write a function that reverses a string?",
    "What's the difference between weather and climate?",
    "Recommend a name for a small grey kitten.",
    "If I save 15 dollars a week, how long until I have 200?",
    "Describe your ideal weekend in three sentences.",
    "What does 'ephemeral' mean?",
    "Count backwards from 10 to 1.",
    "How do I boil an egg so the yolk stays soft?",
    "Turn this into a bullet list: milk, bread, tea, soap.",
    "Who wrote Don Quixote?",
    "What's 7 times 8, and how can I remember it?",
)
# Multi-turn chats written by hand (user, assistant, ..., user), in no generated template.
FREE_CHAT = (
    ("I'm planning a picnic on Saturday.", "That sounds lovely! Do you need help with food, games or a packing list?",
     "Food ideas please, for four people, nothing that needs cooking."),
    ("What's a good first programming language?", "Python is a popular choice: its syntax is readable and it is used everywhere.",
     "OK, how do I print hello world in it?"),
    ("my tomato plants have yellow leaves", "Yellow leaves often mean too much water or too little nitrogen. How often do you water them?",
     "every day, in the morning"),
    ("Can you recommend a book?", "Sure! What kind of books do you enjoy: novels, history, science, something else?",
     "Something about space, but not too technical."),
    ("How many legs does a spider have?", "A spider has eight legs.", "And an ant?"),
    ("I need to write a speech for my friend's wedding.", "Happy to help. How do you know the couple, and how long should it be?",
     "We met at university, and about two minutes."),
    ("What's 15% of 80?", "15% of 80 is 12.", "And if the price is 80 plus a 15% tip, what do I pay?"),
    ("Tell me about Mars.", "Mars is the fourth planet from the Sun, a cold desert world with a thin atmosphere and two small moons.",
     "Could people live there one day?"),
    ("I keep forgetting to drink water.", "A simple trick is to tie drinking to habits you already have, like every meal or every meeting.",
     "Any apps or gadgets that help?"),
    ("Write me a Python function that adds two numbers.", "def add(a, b):\n    return a + b",
     "Now make it add any number of numbers."),
    ("Which is heavier, a kilo of feathers or a kilo of steel?", "They weigh the same: one kilogram each.",
     "Then why does steel feel heavier?"),
    ("I want to start running.", "Great goal! Begin with short run-walk sessions three times a week and build up slowly.",
     "How long until I can run 5 km without stopping?"),
)
_SEED = 707


def conversations(name: str, n: int) -> list[list[dict]]:
    if name in FAMILIES:
        return [[{"role": "user", "content": s.prompt}] for s in make_samples(n, _SEED + FAMILIES.index(name), (name,))]
    if name == "tasks":
        return [[{"role": "user", "content": s.prompt}] for s in make_samples(n, _SEED + 10, FAMILIES[:4])]
    if name == "free":
        return [[{"role": "user", "content": FREE[i % len(FREE)]}] for i in range(n)]
    if name == "freechat":
        convs = []
        for i in range(n):
            turns = FREE_CHAT[i % len(FREE_CHAT)]
            convs.append([{"role": "user" if j % 2 == 0 else "assistant", "content": t} for j, t in enumerate(turns)])
        return convs
    if name == "chat":
        r = random.Random(_SEED + 20)
        pool = make_samples(3 * n, _SEED + 21)
        convs = []
        for i in range(n):
            a, b, q = pool[3 * i], pool[3 * i + 1], pool[3 * i + 2]
            if r.random() < 0.5:
                a, b = b, a
            convs.append([{"role": "user", "content": a.prompt}, {"role": "assistant", "content": a.response},
                          {"role": "user", "content": b.prompt}, {"role": "assistant", "content": b.response},
                          {"role": "user", "content": q.prompt}])
        return convs
    raise DFlashConfigError(f"unknown prompt set {name!r}: use one of {', '.join(BUILTIN)} or NAME=PATH")


def open_text(path: str):
    """A text file for reading; ``.xz`` ones decompressed on the fly (the training data kept in git)."""
    if path.endswith(".xz"):
        import lzma

        return lzma.open(path, "rt")
    return open(path)


def read_conversations(path: str) -> list[list[dict]]:
    """Every prompt in a file, as a conversation: .jsonl lines hold {"messages": [...]} or
    {"prompt": "..."}; any other file holds one user prompt per non-empty line, with a literal
    \\n for a line break; either may be xz-compressed (``.xz``). The one reader behind `bench --prompt-sets NAME=PATH` and `regen --prompts`."""
    try:
        with open_text(path) as f:
            if path.removesuffix(".xz").endswith(".jsonl"):
                rows = [json.loads(line) for line in f if line.strip()]
                convs = [r["messages"] if r.get("messages") else [{"role": "user", "content": r["prompt"]}] for r in rows]
            else:
                convs = [[{"role": "user", "content": line.rstrip("\n").replace("\\n", "\n")}] for line in f if line.strip()]
    except OSError as e:
        raise DFlashConfigError(f"prompt file {path}: {e.strerror}; pass an existing file") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DFlashConfigError(f"prompt file {path}: a line is not {{\"messages\": [...]}} or {{\"prompt\": \"...\"}} "
                                f"({type(e).__name__}: {e})") from None
    if not convs:
        raise DFlashConfigError(f"prompt file {path} holds no prompts")
    return convs


def _from_file(path: str, n: int) -> list[list[dict]]:
    convs = read_conversations(path)
    return [convs[i % len(convs)] for i in range(n)]


def chat_ids(tokenizer, conv) -> list[int]:
    """Prompt token ids of a conversation (a list of {"role", "content"}) or of one user turn (a
    string), through the tokenizer's chat template, with the assistant's turn opened; a tokenizer
    without a template gets the turns' contents joined by newlines. Every prompt the project
    sends (bench, demo, training data, tests) is made here."""
    msgs = [{"role": "user", "content": conv}] if isinstance(conv, str) else conv
    if getattr(tokenizer, "chat_template", None):
        t = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
        if hasattr(t, "keys"):  # a BatchEncoding from tokenizers that ignore return_dict
            t = t["input_ids"]
    else:
        t = tokenizer("\n".join(m["content"] for m in msgs))["input_ids"]
    return [int(x) for x in t]


def prompt_set(spec: str, tokenizer, n: int) -> tuple[str, list[list[int]]]:
    """(name, n tokenized prompts) for a built-in name or NAME=PATH."""
    name, _, path = spec.partition("=")
    convs = _from_file(path, n) if path else conversations(name, n)
    return name, [chat_ids(tokenizer, msgs) for msgs in convs]
