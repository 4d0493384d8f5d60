"""A diverse prompt mix for training a drafter on a real instruct target, written here (no datasets
can be downloaded): instructions, explanations, factual QA, arithmetic word problems, code,
rewriting a given passage, advice, comparisons, lists, and several lengths. Multi-turn chats are
made in a second pass from the target's own first answers (`follow_ups`).

    dflash-vllm prompts --n 1600 --out data.jsonl                  # the mix
    dflash-vllm prompts --set free,freechat --out heldout.jsonl    # built-in held-out sets
    dflash-vllm prompts --set self --target T --n 6000 --out s.jsonl  # written by the target (hf_generate.py)

The held-out evaluation prompts (`dflash_vllm.prompts.FREE` and `FREE_CHAT`) are written by
hand in other words; `tests/unit/test_prompt_mix.py` checks none of them is generated here.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass

from ..options import add_options, opt, parse_into

TOPICS = (
    "photosynthesis", "the water cycle", "volcanoes", "black holes", "the moon's phases", "earthquakes", "rainbows",
    "the immune system", "vaccines", "sleep", "memory", "habits", "exercise", "nutrition", "coffee", "bread baking",
    "composting", "bees", "whales", "penguins", "forests", "deserts", "glaciers", "ocean tides", "wind power",
    "solar panels", "batteries", "electric cars", "the internet", "email", "passwords", "encryption", "databases",
    "cloud computing", "recursion", "sorting algorithms", "binary numbers", "version control", "unit tests",
    "the Roman Empire", "the printing press", "the industrial revolution", "ancient Egypt", "the Silk Road",
    "democracy", "inflation", "interest rates", "budgeting", "saving money", "taxes", "supply and demand",
    "climate change", "recycling", "plastic pollution", "public transport", "city parks", "libraries",
    "learning a language", "playing the piano", "chess", "football", "running a marathon", "yoga", "meditation",
    "time management", "public speaking", "job interviews", "teamwork", "writing an essay", "reading more books",
    "gardening", "houseplants", "dogs", "cats", "birds", "fishing", "camping", "hiking", "travel", "maps",
    "the solar system", "gravity", "magnets", "electricity", "sound", "light", "heat", "atoms", "DNA", "evolution",
    "dinosaurs", "fossils", "weather forecasts", "clouds", "snow", "thunderstorms", "bridges", "skyscrapers",
    "airplanes", "trains", "bicycles", "robots", "artificial intelligence", "smartphones", "video games", "music",
    "painting", "photography", "movies", "poetry", "friendship", "kindness", "cooking rice", "tea", "chocolate",
)
EXPLAIN = (
    "Explain {t} in simple terms.", "What is {t}?", "Can you explain how {t} works?", "Give me a short overview of {t}.",
    "Why does {t} matter?", "Describe {t} to a ten-year-old.", "Tell me three interesting facts about {t}.",
    "What are the main ideas behind {t}?", "Write a short paragraph about {t}.", "What are common misconceptions about {t}?",
    "How would you teach {t} to a beginner?", "Summarize what someone should know about {t}.",
)
HOWTO = (
    "How do I get started with {t}?", "What are some tips for {t}?", "Give me a step-by-step guide to {t}.",
    "What mistakes should I avoid with {t}?", "List five things to know before trying {t}.",
)
ACTIVITIES = (
    "learning to cook", "starting a vegetable garden", "training a puppy", "studying for an exam", "running 5 km",
    "writing a cover letter", "planning a trip", "cleaning a kitchen", "saving for a holiday", "learning Python",
    "making friends in a new city", "keeping a journal", "organizing a closet", "waking up early", "baking cookies",
    "giving a presentation", "painting a room", "learning to swim", "reducing screen time", "hosting a dinner party",
)
COMPARE = (
    ("cats", "dogs"), ("tea", "coffee"), ("trains", "planes"), ("books", "films"), ("summer", "winter"),
    ("Python", "JavaScript"), ("renting", "buying a home"), ("walking", "cycling"), ("the sun", "the moon"),
    ("weather", "climate"), ("viruses", "bacteria"), ("lists", "tuples in Python"), ("city life", "country life"),
    ("saving", "investing"), ("email", "letters"), ("solar power", "wind power"), ("lakes", "rivers"),
)
COMPARE_T = ("What is the difference between {a} and {b}?", "Compare {a} and {b}.", "{a} or {b}: which is better and why?",
             "Give me pros and cons of {a} versus {b}.")
WRITE = (
    "Write a short poem about {t}.", "Write a haiku about {t}.", "Write a short story about {t}.",
    "Write a limerick about {t}.", "Write a tweet about {t}.", "Write a slogan for a campaign about {t}.",
    "Write an opening line for a novel about {t}.", "Write a short dialogue between two friends about {t}.",
)
EMAILS = (
    "Write a polite email asking my manager for a day off next {d}.", "Write a thank-you note to a teacher.",
    "Write a short message inviting my neighbours to a party on {d}.", "Write an email to cancel a gym membership.",
    "Write a complaint to a shop about a late delivery.", "Write a reply accepting a job offer.",
    "Write a text message apologizing for missing a friend's call.", "Write a short birthday message for my sister.",
)
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
FACTS = (
    "What is the capital of {c}?", "What language is spoken in {c}?", "Tell me about the history of {c}.",
    "What is {c} famous for?", "What food is popular in {c}?", "What is the weather like in {c}?",
)
COUNTRIES = ("France", "Japan", "Brazil", "Canada", "Kenya", "India", "Italy", "Mexico", "Egypt", "Norway", "Australia",
             "Germany", "Spain", "China", "Argentina", "Greece", "Thailand", "Turkey", "Ireland", "Vietnam", "Chile")
NAMES = ("Anna", "Ben", "Carla", "David", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jack", "Kai", "Lena", "Maya", "Noah")
ITEMS = ("apples", "pencils", "stickers", "books", "marbles", "cookies", "cards", "stamps", "shells", "coins")
CODE = (
    "Write a Python function that {f}.", "How would I {f} in Python?", "Show me Python code to {f}.",
    "Write a JavaScript function that {f}.", "Write a function that {f} and explain it.",
)
FUNCS = (
    "reverses a string", "checks if a number is prime", "returns the largest item in a list", "counts the vowels in a word",
    "computes the factorial of n", "removes duplicates from a list", "checks if a word is a palindrome",
    "converts Celsius to Fahrenheit", "sums the even numbers in a list", "finds the average of a list of numbers",
    "returns the n-th Fibonacci number", "sorts a list of names alphabetically", "counts how often each word appears",
    "merges two sorted lists", "flattens a nested list", "checks whether a year is a leap year", "reads a file line by line",
    "capitalizes every word in a sentence", "finds the second smallest number", "validates an email address",
)
CODE_EXPLAIN = (
    "What does this code do?\n\n{c}", "Explain this Python snippet:\n\n{c}", "Is there a bug in this code?\n\n{c}",
    "How can I make this faster?\n\n{c}",
)
SNIPPETS = (
    "for i in range(10):\n    print(i * i)", "def f(x):\n    return x[::-1]", "nums = [3, 1, 2]\nnums.sort()\nprint(nums)",
    "total = 0\nfor n in data:\n    if n % 2 == 0:\n        total += n", "x = {'a': 1, 'b': 2}\nfor k, v in x.items():\n    print(k, v)",
    "def add(a, b=[]):\n    b.append(a)\n    return b", "with open('f.txt') as f:\n    lines = f.readlines()",
    "while n > 1:\n    n = n // 2\n    steps += 1",
)
PASSAGES = (
    "The town library opened in 1902 with only two hundred books. Over the years it grew into the largest library in the "
    "region, and today it lends ebooks, tools and even musical instruments to its members.",
    "Honeybees communicate the location of flowers with a waggle dance. The angle of the dance shows the direction relative "
    "to the sun, and its length tells the other bees how far away the food is.",
    "Our team finished the project two weeks late because the supplier changed the parts at the last minute. We have since "
    "added a second supplier and a weekly check of every order.",
    "Regular walking lowers blood pressure, improves mood and helps people sleep. Experts recommend at least thirty minutes "
    "a day, which can be split into shorter walks.",
    "The new bus line connects the university with the train station every ten minutes. Students can ride for free with "
    "their card, and the buses run until midnight on weekends.",
)
REWRITE = ("Summarize this in one sentence:\n\n{p}", "Rewrite this more formally:\n\n{p}", "Make this text simpler:\n\n{p}",
           "Give this paragraph a title:\n\n{p}", "Turn this into three bullet points:\n\n{p}", "Translate this into French:\n\n{p}")
ADVICE = (
    "I feel tired every afternoon. What could help?", "My friend forgot my birthday. How should I bring it up?",
    "I have an exam in three days and I haven't started. What should I do?", "How can I stay motivated when working from home?",
    "I want to eat healthier but I'm busy. Any ideas?", "How do I say no to extra work politely?",
    "What are good questions to ask at the end of a job interview?", "How can I make my small apartment feel bigger?",
    "I'm nervous about flying. Any tips?", "What should I pack for a weekend in the mountains?",
)
LISTS = ("List {n} {x}.", "Name {n} {x}.", "Give me {n} examples of {x}.", "What are {n} {x}?")
LIST_X = ("animals that live in the ocean", "countries in Europe", "vegetables that grow underground", "famous scientists",
          "board games for families", "ways to save water", "healthy breakfast ideas", "programming languages",
          "musical instruments", "hobbies you can do at home", "birds that cannot fly", "things to do on a rainy day")
FOLLOW_UPS = (
    "Can you make that shorter?", "Thanks! Can you give me an example?", "Why is that?", "Can you explain that more simply?",
    "What else should I know?", "Can you put that in a list?", "Interesting. Tell me more.", "How would I use that in practice?",
    "Could you summarize your answer in one sentence?", "What would be a good next step?",
)


def _math(r: random.Random) -> str:
    a, b, c = r.randint(2, 60), r.randint(2, 40), r.randint(2, 9)
    n1, n2 = r.sample(NAMES, 2)
    it = r.choice(ITEMS)
    return r.choice((
        f"{n1} has {a} {it} and gives {b if b < a else a // 2} to {n2}. How many {it} does {n1} have left?",
        f"{n1} buys {c} bags with {b} {it} in each. How many {it} is that in total?",
        f"What is {a} times {c}?", f"What is {a * c} divided by {c}?", f"Calculate {a} + {b} - {c}.",
        f"A ticket costs ${c}. How much do {b} tickets cost?", f"What is {c * 10} percent of {a * 10}?",
        f"If a car drives {a} km per hour for {c} hours, how far does it go?",
        f"{n1} reads {c} pages a day. How many days to finish a {a * c}-page book?",
        f"Convert {a} kilometres to metres.", f"How many minutes are in {c} hours?",
        f"Sort these numbers from smallest to largest: {', '.join(str(r.randint(1, 99)) for _ in range(r.randint(4, 7)))}.",
        f"Solve for x: {c}x + {b} = {c * a + b}.",
    ))


def one_prompt(r: random.Random) -> str:
    k = r.random()
    t = r.choice(TOPICS)
    if k < 0.20:
        return r.choice(EXPLAIN).format(t=t)
    if k < 0.27:
        return r.choice(HOWTO).format(t=r.choice(ACTIVITIES))
    if k < 0.33:
        a, b = r.choice(COMPARE)
        return r.choice(COMPARE_T).format(a=a, b=b)
    if k < 0.41:
        return r.choice(WRITE).format(t=t)
    if k < 0.45:
        return r.choice(EMAILS).format(d=r.choice(DAYS))
    if k < 0.51:
        return r.choice(FACTS).format(c=r.choice(COUNTRIES))
    if k < 0.63:
        return _math(r)
    if k < 0.73:
        return r.choice(CODE).format(f=r.choice(FUNCS))
    if k < 0.77:
        return r.choice(CODE_EXPLAIN).format(c=r.choice(SNIPPETS))
    if k < 0.83:
        return r.choice(REWRITE).format(p=r.choice(PASSAGES))
    if k < 0.90:
        return r.choice(ADVICE)
    return r.choice(LISTS).format(n=r.choice(("three", "five", "4", "6", "ten")), x=r.choice(LIST_X))


def make_prompts(n: int, seed: int = 0) -> list[str]:
    """n distinct prompts (as many distinct as the templates allow; duplicates are skipped)."""
    r = random.Random(seed)
    seen, out = set(), []
    for _ in range(n * 20):
        p = one_prompt(r)
        if p not in seen:
            seen.add(p)
            out.append(p)
            if len(out) == n:
                break
    return out


def follow_ups(rows: list[dict], n: int, seed: int = 1) -> list[list[dict]]:
    """Multi-turn chats from first-turn (prompt, answer) pairs: the target's answer, then a follow-up."""
    r = random.Random(seed)
    picks = r.sample(rows, min(n, len(rows)))
    return [[{"role": "user", "content": x["prompt"]}, {"role": "assistant", "content": x["answer"]},
             {"role": "user", "content": r.choice(FOLLOW_UPS)}] for x in picks]


@dataclass
class PromptsJob:
    """One `dflash-vllm prompts` run: a prompt file for `dflash-vllm regen`, `bench NAME=PATH` or the demo."""

    out: str = opt(help="the .jsonl to write ({prompt} or {messages} per line)", required=True)
    set: str = opt("mix", "mix: the generated mix above; self: user prompts sampled from --target (self-instruct); "
                   "task-suite: the demo target's task prompts at --seed; "
                   "or built-in held-out sets, comma-separated (free, freechat, tasks, chat, code, ...)")
    n: int | None = opt(None, "how many (default: 1,600 for mix; every prompt of a fixed set such as free)")
    seed: int = opt(0, "generator seed (mix, task-suite, follow-ups)")
    exclude: str | None = opt(None, "mix: leave out the prompts of this .jsonl (a second batch of new prompts); "
                              "--n then counts the prompts kept")
    target: str | None = opt(None, "self: the target model directory that writes the prompts")
    device: str = opt("cuda", "self: torch device for the target")
    follow_ups_of: list[str] | None = opt(None, "instead: --n multi-turn chats from first turns "
                                          "(their prompts.jsonl, its regen output, the target)",
                                          nargs=3, metavar=("PROMPTS", "REGEN", "TARGET"))


def _rows(job: PromptsJob) -> list[dict]:
    from ..prompts import BUILTIN, conversations

    if job.follow_ups_of:
        from transformers import AutoTokenizer

        prompts_path, regen_path, target = job.follow_ups_of
        tok = AutoTokenizer.from_pretrained(target)
        with open(prompts_path) as f:
            prompts = [json.loads(x)["prompt"] for x in f if x.strip()]
        with open(regen_path) as f:
            answers = [tok.decode(json.loads(x)["response_ids"], skip_special_tokens=True).strip() for x in f if x.strip()]
        rows = [{"prompt": p, "answer": a} for p, a in zip(prompts, answers) if a]
        return [{"messages": m} for m in follow_ups(rows, job.n or 120, job.seed + 1)]
    if job.set == "mix":
        n = job.n or 1600
        if not job.exclude:
            return [{"prompt": p} for p in make_prompts(n, job.seed)]
        from ..prompts import read_conversations

        seen = {c[0]["content"] for c in read_conversations(job.exclude) if len(c) == 1}
        return [{"prompt": p} for p in make_prompts(n + len(seen), job.seed) if p not in seen][:n]
    if job.set == "self":
        if not job.target:
            from ..config import DFlashConfigError

            raise DFlashConfigError("--set self samples prompts from a model: pass --target DIR")
        from ..prompts import read_conversations
        from .hf_generate import load_target, user_prompts

        held = {m["content"] for x in ("free", "freechat") for c in conversations(x, sizes_of(x)) for m in c
                if m["role"] == "user"}
        if job.exclude:
            held |= {c[0]["content"] for c in read_conversations(job.exclude)}
        model, tok = load_target(job.target, job.device)
        return [{"prompt": p} for p in user_prompts(model, tok, job.n or 1600, job.seed, exclude=held)]
    if job.set == "task-suite":
        from .tasks import make_samples

        return [{"prompt": s.prompt} for s in make_samples(job.n or 6000, seed=job.seed)]
    names = [x.strip() for x in job.set.split(",") if x.strip()]
    unknown = [x for x in names if x not in BUILTIN]
    if unknown:
        from ..config import DFlashConfigError

        raise DFlashConfigError(f"unknown prompt set {unknown[0]!r}: use mix, task-suite or {', '.join(BUILTIN)}")
    return [{"messages": m} for x in names for m in conversations(x, job.n or sizes_of(x))]


def sizes_of(name: str) -> int:
    """How many prompts a built-in set has by default: every one of the hand-written held-out sets."""
    from ..prompts import FREE, FREE_CHAT

    return {"free": len(FREE), "freechat": len(FREE_CHAT)}.get(name, 64)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dflash-vllm prompts", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(ap, PromptsJob)
    job = parse_into(PromptsJob, ap.parse_args(argv))
    rows = _rows(job)
    with open(job.out, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    print(f"wrote {len(rows)} prompts to {job.out}")


if __name__ == "__main__":
    main()
