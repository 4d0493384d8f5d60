"""Small, self-made models for tests and smoke runs (nothing can be downloaded here)."""

from __future__ import annotations

import json
import os

import torch

from .config import DrafterConfig
from .torch_drafter import DFlashDrafter


def make_tiny_target(path: str, *, vocab_size: int = 512, hidden_size: int = 128, num_layers: int = 4,
                     num_heads: int = 4, num_kv_heads: int = 2, head_dim: int = 32, seed: int = 0,
                     init_std: float = 0.05, arch: str = "qwen3", max_position_embeddings: int = 4096) -> str:
    """A randomly initialised causal LM in HF format (fp32), Qwen3 or LLaMA (`arch`; LLaMA with
    tied embeddings, like SmolLM2). Deterministic under `seed`."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    if os.path.exists(os.path.join(path, "config.json")):
        return path
    torch.manual_seed(seed)
    config_cls, model_cls = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}[arch]
    cfg = config_cls(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        head_dim=head_dim, max_position_embeddings=max_position_embeddings, tie_word_embeddings=arch == "llama",
        rope_theta=10000.0, torch_dtype="float32", bos_token_id=1, eos_token_id=2,
    )
    model = model_cls(cfg)
    # std 0.05 (vs 0.02 default): greedy outputs mix short loops with context-dependent runs,
    # so a briefly trained drafter is accepted often but not always.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, init_std)
    model.save_pretrained(path, safe_serialization=True)
    return path


def make_tiny_drafter(path: str, target_path: str, *, num_layers: int = 1, block_size: int = 16,
                      target_layer_ids: list[int] | None = None, mask_token_id: int | None = None,
                      seed: int = 0) -> str:
    """A randomly initialised DFlash drafter sized for the target at `target_path`."""
    with open(os.path.join(target_path, "config.json")) as f:
        t = json.load(f)
    cfg = DrafterConfig.for_target(t, num_layers=num_layers, block_size=block_size,
                                   target_layer_ids=target_layer_ids or [0, t["num_hidden_layers"] // 2],
                                   mask_token_id=t["vocab_size"] - 1 if mask_token_id is None else mask_token_id)
    torch.manual_seed(seed)
    DFlashDrafter(cfg).save_pretrained(path)
    return path


def make_selfdistilled_data(target_path: str, out_jsonl: str, *, num_seqs: int = 192, prompt_len=(4, 24),
                            gen_len: int = 64, seed: int = 0) -> str:
    """The target's own greedy continuations of random prompts (HF, no vLLM): drafter training data."""
    import random

    from transformers import AutoModelForCausalLM

    if os.path.exists(out_jsonl):
        return out_jsonl
    target = AutoModelForCausalLM.from_pretrained(target_path, dtype=torch.float32).eval()
    vocab = target.config.vocab_size
    r = random.Random(seed)
    rows = []
    batch = 32
    with torch.no_grad():
        for b in range(0, num_seqs, batch):  # one prompt length per batch: no padding needed
            n = r.randint(*prompt_len)
            ids = torch.tensor([[r.randrange(3, vocab - 1) for _ in range(n)] for _ in range(min(batch, num_seqs - b))])
            out = target.generate(ids, max_new_tokens=gen_len, do_sample=False, pad_token_id=0, eos_token_id=None)
            rows += [{"prompt_ids": p.tolist(), "response_ids": o[n:].tolist()} for p, o in zip(ids, out)]
    with open(out_jsonl, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return out_jsonl


def make_trained_tiny_drafter(target_path: str, out_dir: str, *, steps: int = 300, seed: int = 0) -> str:
    """A drafter trained briefly on the tiny target's own outputs: acceptance neither zero nor full."""
    from .training.trainer import Recipe, train

    if os.path.exists(os.path.join(out_dir, "config.json")):
        return out_dir
    data = make_selfdistilled_data(target_path, out_dir.rstrip("/") + ".jsonl", seed=seed)
    with open(os.path.join(target_path, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    recipe = Recipe(block_size=16, num_draft_layers=1, num_anchors=8, batch_size=8, lr=2e-3, seed=seed,
                    target_layer_ids=[1, 3])  # includes the last layer: pre-norm features must match vLLM
    train(target_path, data, out_dir, recipe, mask_token_id=vocab - 1, max_steps=steps, progress=False)
    return out_dir
