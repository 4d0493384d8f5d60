"""Target answers without vLLM: batched `transformers` generation on whatever device torch sees.

For a training box (a GPU) where vLLM is not installed; `dflash-vllm regen --engine hf` writes the
same jsonl as the vLLM path (``{"prompt_ids", "response_ids"}``, the end-of-turn token kept at the
end of a finished answer, as vLLM keeps it). Greedy answers are the target's own argmax; in fp32
with TF32 off they match vLLM's CPU fp32 answers up to float rounding (a divergence, when there
is one, comes late in the answer: `regen --engine hf --compare-to` measures it).

Also `user_prompts`: prompts sampled from the target itself (self-instruct): the chat template up
to an open user turn, a starter word, then the target writes the user's message. It gives a
prompt mix no template list gives, in the target's own words.
"""

from __future__ import annotations

import torch

# Openers of the sampled user turns: each request starts with one, so the mix covers asking,
# instructing, explaining, writing, planning... rather than whatever the target's favourite is.
STARTERS = ("", "How", "What", "Why", "Write", "Explain", "Can you", "Give me", "Tell me", "Describe", "List",
            "Create", "Help me", "I", "My", "Please", "Compare", "Summarize", "Which", "Is", "Should I", "Suggest",
            "Plan", "Rewrite", "Solve", "Imagine", "Who", "When", "Where", "Do you", "Could you", "Make",
            "Calculate", "Convert", "Sort", "Fix", "In Python,", "Translate", "Name", "Teach me")


def torch_tf32(on: bool) -> None:
    """TF32 matmuls on CUDA: off for answers that should match fp32 elsewhere, on for training."""
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def load_target(path: str, device: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    return model, AutoTokenizer.from_pretrained(path)


def end_ids(tok, model) -> list[int]:
    """The tokens that end an answer: the tokenizer's eos and the generation config's."""
    ids = {tok.eos_token_id}
    g = getattr(model.generation_config, "eos_token_id", None)
    ids |= set(g if isinstance(g, list) else [g])
    return sorted(i for i in ids if i is not None)


def pad_id(tok, eos: list[int]) -> int:
    """The id left padding uses: the tokenizer's pad token, else the first end token."""
    return tok.pad_token_id if tok.pad_token_id is not None else eos[0]


@torch.no_grad()
def generate(model, prompts: list[list[int]], max_new_tokens: int, eos: list[int], pad_id: int,
             batch_size: int = 256, temperature: float = 0.0, top_p: float = 1.0, seed: int = 0) -> list[list[int]]:
    """Answers (token ids, cut after the first end token, which is kept) to `prompts`, in order;
    prompts run longest first in left-padded batches of `batch_size`."""
    from transformers import GenerationConfig

    device = next(model.parameters()).device
    gc = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=temperature > 0, eos_token_id=eos,
                          pad_token_id=pad_id, temperature=temperature if temperature > 0 else None,
                          top_p=top_p if temperature > 0 else None, top_k=None)
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    out: list[list[int]] = [[] for _ in prompts]
    end = set(eos)
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        t = max(len(prompts[i]) for i in idx)
        ids = torch.tensor([[pad_id] * (t - len(prompts[i])) + prompts[i] for i in idx], device=device)
        att = torch.tensor([[0] * (t - len(prompts[i])) + [1] * len(prompts[i]) for i in idx], device=device)
        if temperature > 0:
            torch.manual_seed(seed + s)
        new = model.generate(input_ids=ids, attention_mask=att, generation_config=gc)[:, t:].tolist()
        for i, row in zip(idx, new):
            cut = next((j + 1 for j, x in enumerate(row) if x in end), len(row))
            out[i] = row[:cut]
    return out


def _user_turn_prefix(tok) -> str:
    """The chat template's text up to the content of the first user turn."""
    mark = "\x1f\x1e"
    text = tok.apply_chat_template([{"role": "user", "content": mark}], tokenize=False, add_generation_prompt=False)
    if mark not in text:
        raise ValueError("the tokenizer's chat template does not show the user's content")
    return text[: text.index(mark)]


def user_prompts(model, tok, n: int, seed: int = 0, batch_size: int = 2048, max_new_tokens: int = 80,
                 exclude: set[str] = frozenset(), temperature: float = 1.0, top_p: float = 0.95) -> list[str]:
    """Up to `n` distinct user prompts written by the target (see the module docstring).

    Kept: finished turns (the end token came) of 3 to 80 words, no special tokens, none in
    `exclude` (held-out prompts), none repeated (case-insensitively)."""
    import random

    r = random.Random(seed)
    prefix = _user_turn_prefix(tok)
    eos = end_ids(tok, model)
    seen = {x.strip().lower() for x in exclude}
    kept: list[str] = []
    rounds = 0
    while len(kept) < n and rounds < 8:
        want = min(batch_size * 2, int((n - len(kept)) * 1.5) + 8)
        starters = [r.choice(STARTERS) for _ in range(want)]
        ids = [tok(prefix + s, add_special_tokens=False)["input_ids"] for s in starters]
        outs = generate(model, ids, max_new_tokens, eos, pad_id(tok, eos),
                        batch_size, temperature, top_p, seed=seed * 1000 + rounds)
        for s, o in zip(starters, outs):
            if not o or o[-1] not in eos:
                continue
            text = (s + tok.decode(o[:-1], skip_special_tokens=False)).strip()
            words = len(text.split())
            if not 3 <= words <= 80 or "<|" in text or text.lower() in seen:
                continue
            seen.add(text.lower())
            kept.append(text)
            if len(kept) == n:
                break
        rounds += 1
    return kept
