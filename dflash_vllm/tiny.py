"""Small, self-made models for tests and smoke runs (nothing can be downloaded here)."""

from __future__ import annotations

import json
import os

import torch

from .config import DrafterConfig
from .modeling import DFlashDrafter


def make_tiny_target(path: str, *, vocab_size: int = 512, hidden_size: int = 128, num_layers: int = 4,
                     num_heads: int = 4, num_kv_heads: int = 2, head_dim: int = 32, seed: int = 0) -> str:
    """A randomly initialised Qwen3 causal LM in HF format (fp32). Deterministic under `seed`."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if os.path.exists(os.path.join(path, "config.json")):
        return path
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        head_dim=head_dim, max_position_embeddings=4096, tie_word_embeddings=False,
        rope_theta=10000.0, torch_dtype="float32", bos_token_id=1, eos_token_id=2,
    )
    model = Qwen3ForCausalLM(cfg)
    # Larger-than-default init makes greedy outputs depend on the context, not one fixed loop.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.08)
    model.save_pretrained(path, safe_serialization=True)
    return path


def make_tiny_drafter(path: str, target_path: str, *, num_layers: int = 1, block_size: int = 16,
                      target_layer_ids: list[int] | None = None, mask_token_id: int | None = None,
                      seed: int = 0) -> str:
    """A randomly initialised DFlash drafter sized for the target at `target_path`."""
    with open(os.path.join(target_path, "config.json")) as f:
        t = json.load(f)
    cfg = DrafterConfig(
        hidden_size=t["hidden_size"], num_hidden_layers=num_layers, num_attention_heads=t["num_attention_heads"],
        num_key_value_heads=t["num_key_value_heads"], head_dim=t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"],
        intermediate_size=t["intermediate_size"], vocab_size=t["vocab_size"], rms_norm_eps=t.get("rms_norm_eps", 1e-6),
        rope_theta=t.get("rope_theta") or (t.get("rope_parameters") or {}).get("rope_theta", 1e6),
        max_position_embeddings=t.get("max_position_embeddings", 4096), block_size=block_size,
        num_target_layers=t["num_hidden_layers"],
        target_layer_ids=target_layer_ids or [0, t["num_hidden_layers"] // 2],
        mask_token_id=t["vocab_size"] - 1 if mask_token_id is None else mask_token_id,
    )
    torch.manual_seed(seed)
    DFlashDrafter(cfg).save_pretrained(path)
    return path
