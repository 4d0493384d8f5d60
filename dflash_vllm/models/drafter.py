"""The DFlash drafter as a vLLM model, built from vLLM's parallel layers so it shards under TP.

Two entry points, matching the two halves of a DFlash step:
- ``write_context_kv``: fuse new target features (fc + hidden_norm, eq. 9) and write their
  per-layer K/V into each layer's paged cache, once (eq. 10, context half). Context is never
  recomputed: later steps read it back from the cache.
- ``forward``: run the query block ``[anchor, mask x K]`` through every layer; each layer's
  attention (our backend) reads the cached context and attends bidirectionally in the block.

Embedding and LM head are the target's (bound by the proposer), not copies.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from vllm.config import VllmConfig
from vllm.distributed import get_tensor_model_parallel_world_size
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import QKVParallelLinear, ReplicatedLinear, RowParallelLinear
from vllm.model_executor.layers.rotary_embedding import get_rope
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.qwen2 import Qwen2MLP

from ..attention.backend import DFlashAttentionBackend, write_kv
from ..config import DrafterConfig

# Names in the published checkpoints -> (our fused parameter, shard id).
_STACKED = {
    ".q_proj.": (".qkv_proj.", "q"),
    ".k_proj.": (".qkv_proj.", "k"),
    ".v_proj.": (".qkv_proj.", "v"),
    ".gate_proj.": (".gate_up_proj.", 0),
    ".up_proj.": (".gate_up_proj.", 1),
}


class DrafterAttention(nn.Module):
    def __init__(self, cfg: DrafterConfig, max_position: int, cache_config, prefix: str):
        super().__init__()
        tp = get_tensor_model_parallel_world_size()
        if cfg.num_attention_heads % tp:
            raise ValueError(f"drafter num_attention_heads {cfg.num_attention_heads} is not divisible by TP={tp}")
        self.num_heads = cfg.num_attention_heads // tp
        self.num_kv_heads = max(1, cfg.num_key_value_heads // tp)
        self.head_dim = cfg.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.qkv_proj = QKVParallelLinear(
            cfg.hidden_size, self.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads,
            bias=cfg.attention_bias, prefix=f"{prefix}.qkv_proj",
        )
        self.o_proj = RowParallelLinear(
            cfg.num_attention_heads * self.head_dim, cfg.hidden_size, bias=cfg.attention_bias, prefix=f"{prefix}.o_proj"
        )
        self.q_norm = RMSNorm(self.head_dim, eps=cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, eps=cfg.rms_norm_eps)
        self.rotary_emb = get_rope(
            self.head_dim, max_position=max_position, rope_parameters=cfg.rope_parameters  # rope_scaling included
        )
        self.attn = Attention(
            self.num_heads, self.head_dim, self.head_dim**-0.5, num_kv_heads=self.num_kv_heads,
            cache_config=cache_config, prefix=f"{prefix}.attn", attn_backend=DFlashAttentionBackend,
        )

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        qkv, _ = self.qkv_proj(x)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        n = x.shape[0]
        q = self.q_norm(q.reshape(n, self.num_heads, self.head_dim)).reshape(n, self.q_size)
        k = self.k_norm(k.reshape(n, self.num_kv_heads, self.head_dim)).reshape(n, self.kv_size)
        q, k = self.rotary_emb(positions, q, k)
        out, _ = self.o_proj(self.attn(q, k, v))
        return out


class DrafterLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig, max_position: int, cache_config, prefix: str):
        super().__init__()
        self.self_attn = DrafterAttention(cfg, max_position, cache_config, f"{prefix}.self_attn")
        self.mlp = Qwen2MLP(cfg.hidden_size, cfg.intermediate_size, "silu", prefix=f"{prefix}.mlp")
        self.input_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, positions, h, residual):
        if residual is None:
            residual, h = h, self.input_layernorm(h)
        else:
            h, residual = self.input_layernorm(h, residual)
        h = self.self_attn(positions, h)
        h, residual = self.post_attention_layernorm(h, residual)
        return self.mlp(h), residual


class DFlashDrafterModel(nn.Module):
    """Registered for the ``DFlashDraftModel`` architecture when the add-on is active."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        spec = vllm_config.speculative_config
        assert spec is not None and spec.draft_model_config is not None
        self.cfg = cfg = DrafterConfig.from_pretrained(spec.draft_model_config.model)
        target_layers = vllm_config.model_config.get_total_num_hidden_layers()
        max_model_len = vllm_config.model_config.max_model_len
        # The block reaches K positions past the last context token.
        max_position = max(cfg.max_position_embeddings, max_model_len + cfg.block_size + 1)
        cache_config = vllm_config.cache_config
        # Layer names continue the target's numbering: vLLM orders KV caches by layer index.
        self.layers = nn.ModuleList(
            DrafterLayer(cfg, max_position, cache_config, prefix=f"dflash_drafter.layers.{target_layers + i}")
            for i in range(cfg.num_hidden_layers)
        )
        self.fc = ReplicatedLinear(
            len(cfg.target_layer_ids) * cfg.hidden_size, cfg.hidden_size, bias=False, prefix="fc", return_bias=False
        )
        self.hidden_norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self._target: list[nn.Module] = []  # a list, so the target is not registered as a submodule

    # -- sharing with the target ---------------------------------------------------------
    def bind_target(self, target: nn.Module) -> None:
        self._target = [target]

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self._target[0].embed_input_ids(input_ids)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self._target[0].compute_logits(hidden_states)

    # -- the two halves of a step ---------------------------------------------------------
    @torch.inference_mode()
    def write_context_kv(
        self,
        target_features: torch.Tensor,  # [N, n_target_layers * H]
        positions: torch.Tensor,  # [N]
        slot_mapping: torch.Tensor | None,  # [N]; None = compute only (memory profiling)
    ) -> None:
        n = target_features.shape[0]
        attns = [layer.self_attn for layer in self.layers]
        num_layers, nkv, hd = len(attns), attns[0].num_kv_heads, attns[0].head_dim
        fused = self.hidden_norm(self.fc(target_features))  # [N, H]
        # One GEMM for every layer's K and V instead of L small ones.
        kv = F.linear(fused, self._ctx_kv_weight, self._ctx_kv_bias).view(n, num_layers, 2, nkv, hd)
        # Key norm and RoPE through each layer's own modules, the ones its block keys go
        # through (vLLM's fused ops where enabled): one definition of each, so context and
        # block keys cannot drift apart.
        k = torch.stack([a.k_norm(kv[:, i, 0]) for i, a in enumerate(attns)], dim=1)  # [N, L, nkv, hd]
        rope = attns[0].rotary_emb
        if all(a.rotary_emb is rope for a in attns):  # get_rope shares one module: one call for all layers
            k = rope(positions, k.view(n, num_layers * nkv * hd))[0].view(n, num_layers, nkv, hd)
        else:
            k = torch.stack(
                [a.rotary_emb(positions, k[:, i].reshape(n, nkv * hd))[0].view(n, nkv, hd) for i, a in enumerate(attns)],
                dim=1,
            )
        if slot_mapping is None:
            return
        for i, a in enumerate(attns):
            write_kv(a.attn.kv_cache, k[:, i], kv[:, i, 1], slot_mapping)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, inputs_embeds: torch.Tensor | None = None):
        h = self.embed_input_ids(input_ids) if inputs_embeds is None else inputs_embeds
        residual = None
        for layer in self.layers:
            h, residual = layer(positions, h, residual)
        h, _ = self.norm(h, residual)
        return h

    # -- weights ----------------------------------------------------------------------------
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Published (z-lab, ours) and speculators-format tensors: names mapped by
        checkpoint.drafter_tensor_name, the same map the pre-flight weight check uses."""
        from ..checkpoint import drafter_tensor_name

        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for name, w in weights:
            name = drafter_tensor_name(name)
            if name is None:
                continue  # the target's embedding / LM head (and speculators' verifier copies) are used
            for old, (new, shard) in _STACKED.items():
                if old in name:
                    fused = name.replace(old, new)
                    params[fused].weight_loader(params[fused], w, shard)
                    loaded.add(fused)
                    break
            else:
                if name not in params:
                    raise ValueError(f"unexpected drafter weight {name!r}; is this a DFlash drafter checkpoint?")
                param = params[name]
                getattr(param, "weight_loader", default_weight_loader)(param, w)
                loaded.add(name)
        missing = set(params) - loaded
        if missing:
            raise ValueError(f"drafter checkpoint lacks {sorted(missing)[:4]}; the checkpoint is incomplete")
        self._build_context_kv_weights()
        return loaded

    def _build_context_kv_weights(self) -> None:
        """Every layer's K and V rows of ``qkv_proj``, stacked for ``write_context_kv``'s one GEMM."""
        attns = [layer.self_attn for layer in self.layers]
        self._ctx_kv_weight = torch.cat([a.qkv_proj.weight[a.q_size :] for a in attns], dim=0)
        bias = [a.qkv_proj.bias for a in attns]
        self._ctx_kv_bias = None if bias[0] is None else torch.cat([b[a.q_size :] for a, b in zip(attns, bias)])
