"""The DFlash drafter in plain PyTorch: used by training and by the reference loop.

No vLLM imports here. Parameter names equal the published checkpoint names, so a state dict
saved from this module is a drafter that vLLM (ours or native) and the `dflash` package load.

Shapes: B batch, Q query (block) positions, C context positions, H hidden size.
"""

from __future__ import annotations

import json
import os

import torch
import torch.nn.functional as F
from torch import nn

from .config import DrafterConfig


class _Enough(Exception):
    """Raised by the hook on the deepest selected layer when logits are not wanted."""


def target_layer_outputs(target, input_ids: torch.Tensor, layer_ids: list[int], attention_mask=None,
                         logits: bool = True):
    """Run a HF causal LM; return (logits, [B, T, n * H] outputs of the selected decoder layers).
    With ``logits=False`` the forward stops after the deepest selected layer (no later layers, no
    LM head: a quarter of a small model's FLOPs) and the first element is None.

    Captured with hooks on the decoder layers, i.e. the residual stream *after* layer i, which
    is what vLLM hands the drafter (its aux hidden state i + 1). Not HF's
    ``hidden_states[i + 1]``: for the last layer HF returns the *final-normed* state, and a
    drafter trained on that is fed un-normed features by vLLM; nothing errors, acceptance
    just drops.
    """
    layers = target.model.layers
    captured: dict[int, torch.Tensor] = {}
    last = max(layer_ids)

    def hook(mod, args, out, i):
        captured[i] = out[0] if isinstance(out, tuple) else out
        if not logits and i == last:
            raise _Enough

    hooks = [layers[i].register_forward_hook(lambda m, a, o, i=i: hook(m, a, o, i)) for i in sorted(set(layer_ids))]
    out = None
    try:
        out = target(input_ids=input_ids, attention_mask=attention_mask)
    except _Enough:
        pass
    finally:
        for h in hooks:
            h.remove()
    return (out.logits if out is not None else None), torch.cat([captured[i] for i in layer_ids], dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype,
                 scaled: tuple[torch.Tensor, float] | None = None):
    """NeoX-style (rotate-half) RoPE tables for integer positions [..., N] -> [..., N, head_dim].
    ``scaled``: (inv_freq, attention factor) of a scaled rope (``scaled_rope``); None: plain rope."""
    if scaled is None:
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
        factor = 1.0
    else:
        inv_freq, factor = scaled[0].to(positions.device), scaled[1]
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    if factor == 1.0:
        return emb.cos().to(dtype), emb.sin().to(dtype)
    return (emb.cos() * factor).to(dtype), (emb.sin() * factor).to(dtype)


def scaled_rope(cfg: DrafterConfig) -> tuple[torch.Tensor, float] | None:
    """(inv_freq, attention factor) of the drafter's scaled rope, computed by transformers' own
    rope initialisers (what HF's Qwen3/LLaMA rotary embeddings, z-lab's `dflash` and, with the
    same formulas, vLLM's get_rope use); None for plain rope."""
    if not cfg.rope_scaling:
        return None
    from transformers import Qwen3Config
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope_type = cfg.rope_scaling.get("rope_type", "default")
    if rope_type not in ROPE_INIT_FUNCTIONS:
        raise ValueError(f"rope_type {rope_type!r} is unknown to transformers; use one of {sorted(ROPE_INIT_FUNCTIONS)}")
    hf = Qwen3Config(hidden_size=cfg.hidden_size, num_attention_heads=cfg.num_attention_heads, head_dim=cfg.head_dim,
                     max_position_embeddings=cfg.max_position_embeddings, rope_parameters=dict(cfg.rope_parameters))
    with torch.device("cpu"):  # real tables even while a model is built on the meta device
        inv_freq, factor = ROPE_INIT_FUNCTIONS[rope_type](hf, torch.device("cpu"))
    return inv_freq.float(), float(factor)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [B, heads, N, D]; cos/sin: [B, N, D]
    cos, sin = cos[:, None], sin[:, None]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class DrafterAttention(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.cfg = cfg
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def context_kv(self, ctx: torch.Tensor, ctx_cos, ctx_sin):
        """K/V injected from fused target features: [B, C, H] -> 2 x [B, kv_heads, C, D]."""
        b, c, _ = ctx.shape
        k = self.k_norm(self.k_proj(ctx).view(b, c, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(ctx).view(b, c, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return apply_rope(k, ctx_cos, ctx_sin), v

    def forward(self, x, cos, sin, ctx_k, ctx_v, mask):
        b, q_len, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, q_len, self.num_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, q_len, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k = torch.cat([ctx_k, k], dim=2)  # keys: context first, then the block
        v = torch.cat([ctx_v, v], dim=2)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=self.num_heads != self.num_kv_heads
        )
        return self.o_proj(out.transpose(1, 2).reshape(b, q_len, -1))


class DrafterMLP(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DrafterLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.self_attn = DrafterAttention(cfg)
        self.mlp = DrafterMLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class DFlashDrafter(nn.Module):
    """fc + hidden_norm fuse target features; every layer attends to them as extra K/V.

    ``inject_every_layer=False`` is the input-fusion ablation (EAGLE-3 style): the fused
    features are K/V of the first layer only. It is not a published format: saved, it says so
    (``dflash_vllm.variant``, its own architecture name) and serving refuses it. None: the
    variant ``cfg`` names (every layer unless read from an ablation checkpoint).
    """

    def __init__(self, cfg: DrafterConfig, inject_every_layer: bool | None = None):
        super().__init__()
        self.cfg = cfg
        self.inject_every_layer = cfg.inject_every_layer if inject_every_layer is None else inject_every_layer
        self._scaled_rope = scaled_rope(cfg)
        self.layers = nn.ModuleList([DrafterLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.fc = nn.Linear(len(cfg.target_layer_ids) * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def fuse(self, target_features: torch.Tensor) -> torch.Tensor:
        """[..., n_layers * H] concatenated target hidden states -> [..., H] (eq. 9)."""
        return self.hidden_norm(self.fc(target_features))

    def forward(
        self,
        noise_embeds: torch.Tensor,  # [B, Q, H] target embeddings of [anchor, mask, ...]
        positions: torch.Tensor,  # [B, Q]
        ctx: torch.Tensor,  # [B, C, H] fused target features
        ctx_positions: torch.Tensor,  # [B, C]
        mask: torch.Tensor | None = None,  # [B or 1, 1, Q, C + Q] bool, True = visible
    ) -> torch.Tensor:
        dtype = noise_embeds.dtype
        cos, sin = rope_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta, dtype, self._scaled_rope)
        ccos, csin = rope_cos_sin(ctx_positions, self.cfg.head_dim, self.cfg.rope_theta, dtype, self._scaled_rope)
        h = noise_embeds
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            if self.inject_every_layer or i == 0:
                ctx_k, ctx_v = attn.context_kv(ctx, ccos, csin)
                layer_mask = mask
            else:  # ablation: no target context below the first layer
                ctx_k = ctx_v = noise_embeds.new_zeros(h.shape[0], attn.num_kv_heads, 0, attn.head_dim)
                layer_mask = None if mask is None else mask[..., ctx.shape[1]:]
            h = h + attn(layer.input_layernorm(h), cos, sin, ctx_k, ctx_v, layer_mask)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.norm(h)

    # -- persistence in the published format -------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str, dtype: torch.dtype = torch.float32) -> "DFlashDrafter":
        """Any checkpoint ``DrafterConfig`` reads (published or speculators format, any variant:
        the ablation is built as the ablation, for evaluation; serving refuses it)."""
        from .checkpoint import read_drafter_state_dict

        cfg = DrafterConfig.from_pretrained(path, serving=False)
        model = cls(cfg)
        missing, unexpected = model.load_state_dict(read_drafter_state_dict(cfg.path), strict=False)
        if missing:
            raise ValueError(f"drafter weights in {path} lack {missing[:4]}...; the checkpoint is incomplete")
        return model.to(dtype)

    def save_pretrained(self, path: str, extra_config: dict | None = None) -> None:
        """config.json in the published format plus a ``dflash_vllm`` block recording what is
        needed to serve it: the variant (and, for the ablation, an architecture name no DFlash
        loader takes for the published one), the code that trained it (git commit when run
        from a checkout), and the drafter's rope scaling at the top level."""
        from dataclasses import replace

        from safetensors.torch import save_file

        from .checkpoint import provenance_block, variant_name

        os.makedirs(path, exist_ok=True)
        dcfg = replace(self.cfg, variant=variant_name(self.inject_every_layer))
        cfg = dcfg.to_hf_dict()
        cfg["dflash_vllm"] = {**cfg["dflash_vllm"], **provenance_block(dcfg.variant)}
        cfg["torch_dtype"] = str(next(self.parameters()).dtype).removeprefix("torch.")
        cfg.update(extra_config or {})
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(state, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
