"""Prompt sets for the benchmark, tokenized with the target's own chat template.

Built-in sets (the demo task suite, held-out seeds: neither the target's, the drafter's nor the
tests' data):
  arith, sort, convert, record, code   one task family each (the Table 1-style columns)
  tasks                                 the four non-code families mixed
  chat                                  chat-like: two earlier user/assistant turns from other
                                        families, then a new question (longer, mixed context)
A file gives a custom set: NAME=PATH, PATH a .jsonl of {"prompt": str} or {"messages": [...]}
lines, or a text file with one prompt per line (the way to benchmark a real target).
"""

from __future__ import annotations

import json
import random

from ..training.tasks import FAMILIES, make_samples

BUILTIN = (*FAMILIES, "tasks", "chat")
_SEED = 707


def _messages(name: str, n: int) -> list[list[dict]]:
    if name in FAMILIES:
        return [[{"role": "user", "content": s.prompt}] for s in make_samples(n, _SEED + FAMILIES.index(name), (name,))]
    if name == "tasks":
        return [[{"role": "user", "content": s.prompt}] for s in make_samples(n, _SEED + 10, FAMILIES[:4])]
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
