"""A templated task suite a few-million-parameter model can really learn.

Families: step-by-step arithmetic word problems, list sorting, unit conversion, key-value
record formatting, and small Python functions. Every sample has a checkable answer, so the
demo target's accuracy, loop fraction and n-gram diversity can be reported honestly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

NAMES = ["Tom", "Ana", "Li", "Sara", "Omar", "Mia", "Ben", "Eva", "Raj", "Zoe", "Ivan", "Nora"]
ITEMS = ["apples", "books", "coins", "pens", "cards", "shells", "stamps", "marbles", "eggs", "cups"]
CITIES = ["Paris", "Lima", "Oslo", "Cairo", "Tokyo", "Quito", "Dakar", "Hanoi", "Rome", "Perth"]
UNITS = [("km", "m", 1000), ("m", "cm", 100), ("kg", "g", 1000), ("h", "min", 60), ("min", "s", 60), ("L", "mL", 1000)]
FAMILIES = ("arith", "sort", "convert", "record", "code")


@dataclass
class Sample:
    family: str
    prompt: str
    response: str
    answer: str  # the part of the response that must be right


def _arith(r: random.Random) -> Sample:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    a, b = r.randint(2, 60), r.randint(2, 40)
    c = r.randint(1, a + b - 1)
    prompt = f"{name} has {a} {item}. {name} gets {b} more {item} and gives away {c}. How many {item} does {name} have now?"
    s1, s2 = a + b, a + b - c
    response = f"Step 1: {a} + {b} = {s1}.\nStep 2: {s1} - {c} = {s2}.\nAnswer: {s2}"
    return Sample("arith", prompt, response, str(s2))


def _sort(r: random.Random) -> Sample:
    xs = r.sample(range(1, 100), r.randint(3, 7))
    order = r.choice(["ascending", "descending"])
    ys = sorted(xs, reverse=order == "descending")
    prompt = f"Sort in {order} order: {', '.join(map(str, xs))}"
    response = f"There are {len(xs)} numbers.\nSorted {order}: {', '.join(map(str, ys))}"
    return Sample("sort", prompt, response, ", ".join(map(str, ys)))


def _convert(r: random.Random) -> Sample:
    big, small, f = r.choice(UNITS)
    x = r.randint(1, 30)
    prompt = f"Convert {x} {big} to {small}."
    response = f"1 {big} = {f} {small}.\n{x} {big} = {x} x {f} {small} = {x * f} {small}.\nAnswer: {x * f} {small}"
    return Sample("convert", prompt, response, f"{x * f} {small}")


def _record(r: random.Random) -> Sample:
    name, age, city = r.choice(NAMES), r.randint(18, 90), r.choice(CITIES)
    fields = [("name", name), ("age", str(age)), ("city", city)]
    r.shuffle(fields)
    prompt = "Format as JSON: " + "; ".join(f"{k}={v}" for k, v in fields)
    body = ", ".join(f'"{k}": {v}' if k == "age" else f'"{k}": "{v}"' for k, v in sorted(fields))
    response = "{" + body + "}"
    return Sample("record", prompt, response, response)


def _code(r: random.Random) -> Sample:
    op, sym, verb = r.choice([("add", "+", "sum"), ("sub", "-", "difference"), ("mul", "*", "product")])
    a, b = r.choice(["a", "x", "m", "p"]), r.choice(["b", "y", "n", "q"])
    prompt = f"Write a Python function {op}({a}, {b}) that returns the {verb} of {a} and {b}."
    response = f"def {op}({a}, {b}):\n    return {a} {sym} {b}"
    return Sample("code", prompt, response, f"return {a} {sym} {b}")


_GEN = {"arith": _arith, "sort": _sort, "convert": _convert, "record": _record, "code": _code}


def make_samples(n: int, seed: int, families: tuple[str, ...] = FAMILIES) -> list[Sample]:
    r = random.Random(seed)
    return [_GEN[families[i % len(families)]](r) for i in range(n)]


# The chat format of the demo tokenizer (also its chat template).
USER, ASSISTANT, END = "<|user|>", "<|assistant|>", "<|end|>"
SPECIAL_TOKENS = ["<|pad|>", USER, ASSISTANT, END, "<|mask|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}<|user|>\n{{ m['content'] }}\n"
    "{% elif m['role'] == 'assistant' %}<|assistant|>\n{{ m['content'] }}<|end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def chat_prompt(prompt: str) -> str:
    return f"{USER}\n{prompt}\n{ASSISTANT}\n"


def chat_text(s: Sample) -> str:
    return chat_prompt(s.prompt) + s.response + END + "\n"


def loop_fraction(token_ids: list[int], window: int = 4, repeats: int = 3) -> bool:
    """True when the output ends in the same `window`-gram repeated `repeats` times (a loop)."""
    tail = token_ids[-window * repeats :]
    if len(tail) < window * repeats:
        return False
    return all(tail[i] == tail[i % window] for i in range(len(tail)))


def distinct_ngram_ratio(seqs: list[list[int]], n: int = 4) -> float:
    grams = [tuple(s[i : i + n]) for s in seqs for i in range(len(s) - n + 1)]
    return len(set(grams)) / max(1, len(grams))
