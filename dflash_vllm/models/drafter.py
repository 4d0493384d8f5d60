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
from vllm.forward_context import get_forward_context, is_forward_context_available
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import QKVParallelLinear, ReplicatedLinear, RowParallelLinear
from vllm.model_executor.layers.rotary_embedding import get_rope
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.qwen2 import Qwen2MLP

from .. import envs
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



def fused_ops_available(device) -> bool:
    """vLLM's C++ RMSNorm / add+RMSNorm / SiLU-and-mul kernels, called directly on CPU.

    vLLM 0.32's CPU platform runs RMSNorm and SiluAndMul through ``forward_native`` (its IR op
    priority there is "native"): ~100 us of small PyTorch ops per call on a 16-token block,
    where the C++ kernel it ships takes ~5-25 us (RMSNorm, faster at every size measured;
    SiLU-and-mul only for small blocks, see _CPP_SILU_MAX_ELEMENTS). A 2-layer drafter makes 12
    RMSNorm and 2 SiLU calls per step: over a millisecond per step at batch 1.
    Same weights, same equation; results agree with forward_native to fp32 rounding."""
    if getattr(device, "type", device) != "cpu" or not envs.enabled(envs.FUSED_OPS):
        return False
    ops = getattr(torch.ops, "_C", None)
    return all(hasattr(ops, n) for n in ("rms_norm", "fused_add_rms_norm", "silu_and_mul"))


def rms_norm(norm: RMSNorm, x: torch.Tensor, fused: bool) -> torch.Tensor:
    """``norm(x)`` over the last dimension."""
    if not fused:
        return norm(x)
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(flat)
    torch.ops._C.rms_norm(out, flat, norm.weight.data, norm.variance_epsilon)
    return out.view(x.shape)


def add_rms_norm(norm: RMSNorm, x: torch.Tensor, residual: torch.Tensor, fused: bool):
    """``norm(x, residual)``: (norm(x + residual), x + residual), in place on both when fused."""
    if not fused:
        return norm(x, residual)
    # The C++ op reads and writes both as contiguous rows: a strided view (the mask rows of a
    # two-row block) would silently mix requests.
    x, residual = x.contiguous(), residual.contiguous()
    torch.ops._C.fused_add_rms_norm(x, residual, norm.weight.data, norm.variance_epsilon)
    return x, residual


# vLLM's C++ SiLU-and-mul runs on one thread: faster than forward_native below ~32K output
# elements (16 tokens x 1536: 75 against 144 us), 2x slower at 1024 tokens (2 cores, fp32).
_CPP_SILU_MAX_ELEMENTS = 32768


def mlp(m: Qwen2MLP, x: torch.Tensor, fused: bool) -> torch.Tensor:
    gate_up, _ = m.gate_up_proj(x)
    if not fused or gate_up.numel() // 2 > _CPP_SILU_MAX_ELEMENTS:
        out, _ = m.down_proj(m.act_fn(gate_up))
        return out
    act = torch.empty(gate_up.shape[0], gate_up.shape[1] // 2, dtype=gate_up.dtype, device=gate_up.device)
    torch.ops._C.silu_and_mul(act, gate_up.contiguous())
    out, _ = m.down_proj(act)
    return out


def bucket_rows(n: int) -> int:
    """n rounded up to one of 8 row counts per octave above 16 (17-31 by 2, 32-63 by 4, ...):
    at most 1/8 more rows. On CPU every new row count of a linear layer makes oneDNN build a
    primitive (~0.35 ms; the context write's two GEMMs took 1.2-1.4 ms at a new count of 65-74
    rows against 0.55-0.7 at one seen before, session 28), and the rows a step verifies change
    from step to step."""
    if n <= 16:
        return n
    step = 1 << (n.bit_length() - 4)
    return -(-n // step) * step


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
        self.fused = False  # set by DFlashDrafterModel

    def forward(self, positions: torch.Tensor, x: torch.Tensor, block_len: int | None = None,
                rows: torch.Tensor | None = None) -> torch.Tensor:
        """``block_len``: only the mask rows (1..block_len-1 of each block) go on past attention.
        ``rows``: ``x`` holds distinct rows only and row r of the layer's input is ``x[rows[r]]``
        (gathered after the QKV projection: it acts row by row, and a row's position first
        matters at RoPE)."""
        qkv, _ = self.qkv_proj(x)
        if rows is not None:
            qkv = qkv.index_select(0, rows)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        n = qkv.shape[0]
        q = rms_norm(self.q_norm, q.reshape(n, self.num_heads, self.head_dim), self.fused).reshape(n, self.q_size)
        k = rms_norm(self.k_norm, k.reshape(n, self.num_kv_heads, self.head_dim), self.fused).reshape(n, self.kv_size)
        q, k = self.rotary_emb(positions, q, k)
        out = self._attend(q, k, v)
        out, _ = self.o_proj(out if block_len is None else mask_rows(out, block_len))
        return out

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``self.attn(q, k, v)``. Where the step's metadata runs vLLM's CPU kernel (eager: never
        inside a compiled graph), the backend's kernel branch is called here
        (``DFlashAttentionImpl.kernel_forward``): what vLLM's ``Attention.forward`` does around
        it on CPU (the opaque ``torch.ops.vllm.unified_attention_with_output`` custom op, the
        forward context's layer lookups) costs ~25-40 us
        per layer of a 60-100 us attention call at batch 1 on the demo pair (session 43,
        ``bench/results/s43/scratch/attend_ab.py``), and our layers need none of it: the
        backend is ours, and the cache and metadata are the ones that call would find. The
        same kernel, arguments and output (``test_backend_ops.py``, the parity tests)."""
        if not torch.compiler.is_compiling():
            md = _layer_metadata(self.attn.layer_name)
            if getattr(md, "kernel", None) is not None and q.shape[0] == md.num_actual_tokens:
                out = torch.empty(q.shape[0], self.q_size, dtype=q.dtype, device=q.device)
                return self.attn.impl.kernel_forward(q, k, v, self.attn.kv_cache, md, out)
        return self.attn(q, k, v)


def _layer_metadata(layer_name: str):
    """This forward's attention metadata for ``layer_name`` (a dict set by ``set_forward_context``),
    or None (no forward context, or another layout: vLLM's own path then decides)."""
    if not is_forward_context_available():
        return None
    md = get_forward_context().attn_metadata
    return md.get(layer_name) if isinstance(md, dict) else None


def mask_rows(x: torch.Tensor, block_len: int) -> torch.Tensor:
    """Rows 1..block_len-1 of each block of ``block_len`` rows (the masks; the anchor dropped),
    contiguous (for block_len 2, ``reshape`` alone returns a strided view)."""
    return x.view(-1, block_len, x.shape[-1])[:, 1:].reshape(-1, x.shape[-1]).contiguous()


class DrafterLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig, max_position: int, cache_config, prefix: str):
        super().__init__()
        self.self_attn = DrafterAttention(cfg, max_position, cache_config, f"{prefix}.self_attn")
        self.mlp = Qwen2MLP(cfg.hidden_size, cfg.intermediate_size, "silu", prefix=f"{prefix}.mlp")
        self.input_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, positions, h, residual, block_len: int | None = None, rows: torch.Tensor | None = None):
        """``block_len``: only the mask rows go on past attention (the last layer's choice:
        nothing reads an anchor's output there). ``rows`` (the first layer only, no
        ``residual``): ``h`` holds the input's distinct rows, row r of the input is
        ``h[rows[r]]``; the input norm and the QKV projection run over the distinct rows."""
        fused = self.self_attn.fused
        if residual is None:
            residual, h = h, rms_norm(self.input_layernorm, h, fused)
        else:
            h, residual = add_rms_norm(self.input_layernorm, h, residual, fused)
        h = self.self_attn(positions, h, block_len, rows)
        if rows is not None:
            residual = residual.index_select(0, rows if block_len is None else rows.view(-1, block_len)[:, 1:].reshape(-1))
        elif block_len is not None:
            residual = mask_rows(residual, block_len)
        h, residual = add_rms_norm(self.post_attention_layernorm, h, residual, fused)
        return mlp(self.mlp, h, fused), residual


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
        self.fused = fused_ops_available(vllm_config.device_config.device)
        for layer in self.layers:
            layer.self_attn.fused = self.fused

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
        m = bucket_rows(n) if target_features.device.type == "cpu" else n
        if m > n:  # zero rows to a bucketed count (bucket_rows), cut off before anything is written
            target_features = F.pad(target_features, (0, 0, 0, m - n))
        fused = rms_norm(self.hidden_norm, self.fc(target_features), self.fused)  # [M, H]
        # One GEMM for every layer's K and V instead of L small ones.
        kv = F.linear(fused, self._ctx_kv_weight, self._ctx_kv_bias)[:n].view(n, num_layers, 2, nkv, hd)
        # Key norm and RoPE through each layer's own modules, the ones its block keys go
        # through (the same rms_norm call, vLLM's C++ kernels on CPU): one definition of each,
        # so context and block keys cannot drift apart.
        k = torch.stack([rms_norm(a.k_norm, kv[:, i, 0], self.fused) for i, a in enumerate(attns)], dim=1)  # [N, L, nkv, hd]
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

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, inputs_embeds: torch.Tensor | None = None,
                block_len: int | None = None) -> torch.Tensor:
        """Final hidden states of the block's rows [N, H]; with ``block_len``, of the mask rows
        only [N * (block_len - 1) / block_len, H]: the last layer drops each block's anchor row
        after attention, so its o_proj, MLP and the final norm skip the rows nobody reads."""
        h = self.embed_input_ids(input_ids) if inputs_embeds is None else inputs_embeds
        residual = None
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            h, residual = layer(positions, h, residual, block_len if i == last else None)
        h, _ = add_rms_norm(self.norm, h, residual, self.fused)
        return h

    def forward_block(self, anchors: torch.Tensor, positions: torch.Tensor, block_len: int) -> torch.Tensor:
        """Each request's DFlash block ``[anchor, mask x (block_len - 1)]`` from its anchor
        alone: the final hidden states of the mask rows, [n * (block_len - 1), H], as
        ``forward(block ids, positions, block_len=block_len)``. Every mask row enters the
        first layer with the same embedding, so that layer's embedding lookup, input norm and
        QKV projection run over n + 1 distinct rows (the mask token's, then the anchors), not
        n * block_len (at batch 64 with blocks of 16: 65 rows for 1024); the rows are gathered
        after the projection. vLLM's native DFlash runs every row. Same result to the bit on the
        demo pair, 1-6 % less time per forward at batch 1-64 on CPU (session 36,
        bench/results/s36/scratch/block_loop.py). ``positions``: [n * block_len]."""
        n = anchors.shape[0]
        idx = self._block_rows(n, block_len, anchors.device)
        ids = self._ids(n + 1, anchors.device)  # [mask, anchors]
        ids[1:].copy_(anchors)
        x = self.embed_input_ids(ids)  # [1 + n, H]
        last = len(self.layers) - 1
        h, residual = x, None
        for i, layer in enumerate(self.layers):
            h, residual = layer(positions, h, residual, block_len if i == last else None, idx if i == 0 else None)
        h, _ = add_rms_norm(self.norm, h, residual, self.fused)
        return h

    def _ids(self, m: int, device) -> torch.Tensor:
        """The first m of a kept id buffer whose row 0 holds the mask token."""
        t = getattr(self, "_ids_buf", None)
        if t is None or t.numel() < m or t.device != device:
            t = self._ids_buf = torch.full((max(m, 2 * t.numel() if t is not None else 16),), self.cfg.mask_token_id,
                                           dtype=torch.int64, device=device)
        return t[:m]

    def _block_rows(self, n: int, block_len: int, device) -> torch.Tensor:
        """[n * block_len]: the row of ``[mask, anchor_0, ..., anchor_{n-1}]`` each block row
        reads (i + 1 at block i's anchor, 0 at its masks). The table for the largest n seen is
        kept per block length; a smaller batch's is its prefix."""
        cache = self.__dict__.setdefault("_block_rows_cache", {})
        t = cache.get(block_len)
        if t is None or t.numel() < n * block_len or t.device != device:
            m = max(n, 2 * (t.numel() // block_len) if t is not None else 8)
            t = torch.zeros(m, block_len, dtype=torch.int64, device=device)
            t[:, 0] = torch.arange(1, m + 1, device=device)
            t = cache[block_len] = t.view(-1)
        return t[: n * block_len]

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
