"""Prompt sets for the benchmark, tokenized with the target's own chat template.

Built-in sets (the demo task suite, held-out seeds: neither the target's, the drafter's nor the
tests' data):
  arith, sort, convert, record, code   one task family each (the Table 1-style columns)
  tasks                                 the four non-code families mixed
  chat                                  chat-like: two earlier user/assistant turns from other
                                        families, then a new question (longer, mixed context)
  free                                  freely phrased requests written by hand, in no task
                                        template (the drafter's hard case: tau near 1)
A file gives a custom set: NAME=PATH, PATH a .jsonl of {"prompt": str} or {"messages": [...]}
lines, or a text file with one prompt per line (the way to benchmark a real target).
"""

from __future__ import annotations

import json
import random

from ..training.tasks import FAMILIES, make_samples

BUILTIN = (*FAMILIES, "tasks", "chat", "free")

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
_SEED = 707


def _messages(name: str, n: int) -> list[list[dict]]:
    if name in FAMILIES:
        return [[{"role": "user", "content": s.prompt}] for s in make_samples(n, _SEED + FAMILIES.index(name), (name,))]
    if name == "tasks":
        return [[{"role": "user", "content": s.prompt}] for s in make_samples(n, _SEED + 10, FAMILIES[:4])]
    if name == "free":
        return [[{"role": "user", "content": FREE[i % len(FREE)]}] for i in range(n)]
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
    raise ValueError(f"unknown prompt set {name!r}: use one of {', '.join(BUILTIN)} or NAME=PATH")


def _from_file(path: str, n: int) -> list[list[dict]]:
    convs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            if path.endswith(".jsonl"):
                d = json.loads(line)
                convs.append(d["messages"] if "messages" in d else [{"role": "user", "content": d["prompt"]}])
            else:
                convs.append([{"role": "user", "content": line}])
    if not convs:
        raise ValueError(f"prompt file {path} holds no prompts")
    return [convs[i % len(convs)] for i in range(n)]


def prompt_set(spec: str, tokenizer, n: int) -> tuple[str, list[list[int]]]:
    """(name, n tokenized prompts) for a built-in name or NAME=PATH."""
    name, _, path = spec.partition("=")
    convs = _from_file(path, n) if path else _messages(name, n)
    ids = []
    for msgs in convs:
        if getattr(tokenizer, "chat_template", None):
            t = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
        else:
            t = tokenizer("\n".join(m["content"] for m in msgs))["input_ids"]
        ids.append([int(x) for x in t])
    return name, ids
