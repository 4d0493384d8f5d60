"""KV-injection attention for DFlash drafter layers (registered as vLLM's CUSTOM backend).

Layout, per request: queries are the K+1 block positions ``[anchor, mask x K]``; keys and
values are the drafter context (K/V projected from fused target features, in the paged
cache) followed by the block's own K/V; no causal mask anywhere (bidirectional in the block,
and every context position precedes the anchor).

Two implementations of that one attention:
- **CPU: vLLM's paged CPU kernel, in place.** The block's K/V go into the slots at positions
  ``ctx .. ctx + K`` (vLLM reserves them for DFlash: ``num_lookahead_tokens = K + 1``, the
  same slots its native DFlash writes), then one ``cpu_attention_with_kv_cache`` call per
  layer attends non-causally over ``ctx + K + 1`` keys, reading the context where it lies.
  Those slots hold nothing verified: positions >= ctx are past every request's verified
  tokens, never part of a prefix-cached block (only full blocks of verified tokens are), and
  the next context write overwrites them with verified K/V before anything reads them as
  context. The cache is then in the kernel's own layout, written by its own
  ``cpu_attn_reshape_and_cache``. Chosen per cache by ``cpu_kernel_isa`` (head size, block
  size and dtype the kernel supports; ``DFLASH_VLLM_CPU_ATTN=0`` turns it off).
- **Everywhere else: plain PyTorch.** Each request's context is gathered from the cache,
  the block's K/V concatenated (never written to the cache), SDPA without a causal mask.
  Per-layer cache view: ``[num_blocks, num_kv_heads, block_size, 2 * D]`` with each token's K
  in ``[..., :D]`` and V in ``[..., D:]``; indexing is stride-agnostic, so every KV cache
  layout vLLM may pick works. On CUDA SDPA dispatches to its fused kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
    MultipleOf,
)
from vllm.v1.kv_cache_layout import KVCacheLayout

from .. import envs

BACKEND_NAME = "CUSTOM"
# vLLM's block 0 is its null block: never allocated to a request, so a safe sink for padding.
NULL_SLOT = 0



def cpu_kernel_isa(kv_cache: torch.Tensor, head_size: int) -> str | None:
    """The ISA vLLM's CPU attention kernel runs for this cache, or None where the PyTorch path
    runs instead. A function of the cache tensor alone, so the context write and the
    attention that reads it always agree on the layout. Memoised: called ~3 times per step."""
    if kv_cache.device.type != "cpu" or kv_cache.dim() != 4 or kv_cache.numel() == 0:
        return None
    key = (tuple(kv_cache.shape[1:]), kv_cache.dtype, kv_cache.is_contiguous(), head_size,
           envs.enabled(envs.CPU_ATTN))
    if key not in _ISA_MEMO:
        _ISA_MEMO[key] = _pick_isa(*key)
    return _ISA_MEMO[key]


_ISA_MEMO: dict[tuple, str | None] = {}
_CPU_OPS: list = []  # [reshape_and_cache, attention, get_scheduler_metadata], resolved once


def _pick_isa(shape, dtype, contiguous: bool, head_size: int, enabled: bool) -> str | None:
    if (not enabled or not contiguous or dtype not in (torch.float32, torch.bfloat16, torch.float16)
            or shape[1] % 16 or head_size % 16):
        return None
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend, _get_attn_isa

        c = torch.ops._C
        ops = [c.cpu_attn_reshape_and_cache, c.cpu_attention_with_kv_cache, c.get_scheduler_metadata]
        isa = _get_attn_isa(dtype, shape[1], head_size, "auto")
    except (ImportError, AttributeError, RuntimeError, NotImplementedError):
        return None
    if isa != "vec16" and head_size not in CPUAttentionBackend.get_supported_head_sizes():
        return None
    _CPU_OPS[:] = ops
    return isa


def _kernel_caches(kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The key and value halves the CPU kernel reads, as vLLM's CPU backend views them."""
    num_blocks, num_kv_heads, block_size, _ = kv_cache.shape
    return kv_cache.view(num_blocks, num_kv_heads, block_size * 2, -1).chunk(2, dim=2)


def write_kv(kv_cache: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Scatter key/value [N, nkv, D] into the paged cache at linear slots [N], in the layout
    the attention will read (``cpu_kernel_isa``).

    Negative slots (padding: vLLM's ``PAD_SLOT_ID``) are redirected to ``NULL_SLOT`` in vLLM's
    null block instead of being filtered out, so the slots are never inspected on the host
    (no device sync). Only masked key positions ever read the null block.
    """
    if kv_cache.numel() == 0:  # not bound yet (profiling run)
        return
    slot_mapping = slot_mapping.clamp_min(NULL_SLOT)
    isa = cpu_kernel_isa(kv_cache, key.shape[-1])
    if isa is not None:
        key_cache, value_cache = _kernel_caches(kv_cache)
        _CPU_OPS[0](key.to(kv_cache.dtype).contiguous(), value.to(kv_cache.dtype).contiguous(), key_cache, value_cache,
                    slot_mapping.long(), isa, 1.0, 1.0, "auto")
        return
    block_size, d = kv_cache.shape[2], key.shape[-1]
    blk, off = slot_mapping // block_size, slot_mapping % block_size
    kv_cache[blk, :, off, :d] = key.to(kv_cache.dtype)
    kv_cache[blk, :, off, d:] = value.to(kv_cache.dtype)


def context_index(
    block_table: torch.Tensor,  # [num_reqs, max_blocks] physical (kernel) block ids
    seq_lens: torch.Tensor,  # [num_reqs] context lengths
    block_size: int,  # kernel block size (the cache's dim 2)
    query_len: int,
    max_ctx: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Where each request's context lies in the paged cache, and which keys it may see.

    ``max_ctx=None``: exact lengths, read from ``seq_lens`` on the host (free on CPU, a sync on
    a GPU); when all requests have the same length no mask is needed. Otherwise ``max_ctx``
    bounds every length from above and positions past a request's length are masked.

    Returns ``ctx_block``, ``ctx_offset`` [num_reqs, max_ctx] and ``key_mask``
    [num_reqs, 1, 1, max_ctx + query_len] (True = visible; None = all visible).
    """
    num_reqs, device = block_table.shape[0], block_table.device
    seq_lens = seq_lens.to(device)
    uniform = False
    if max_ctx is None:
        lo, hi = torch.aminmax(seq_lens)
        max_ctx = max(1, int(hi))
        uniform = int(lo) == max_ctx
    pos = torch.arange(max_ctx, device=device)
    col = (pos // block_size).clamp_max(block_table.shape[1] - 1)
    ctx_block = block_table[:, col]  # [num_reqs, max_ctx]
    ctx_offset = (pos % block_size).expand(num_reqs, -1)
    key_mask = None
    if not uniform:
        ctx_visible = pos[None, :] < seq_lens[:, None]
        block_visible = torch.ones(num_reqs, query_len, dtype=torch.bool, device=device)
        key_mask = torch.cat([ctx_visible, block_visible], dim=1)[:, None, None, :]
    return ctx_block, ctx_offset, key_mask


def dflash_attention(
    query: torch.Tensor,  # [n, num_heads, D]; n = num_reqs * query_len, request-major
    key: torch.Tensor,  # [n, num_kv_heads, D]: the block's own keys (normed, RoPE'd)
    value: torch.Tensor,  # [n, num_kv_heads, D]
    kv_cache: torch.Tensor,  # [num_blocks, num_kv_heads, block_size, 2 * D], any strides
    md: "DFlashAttentionMetadata",
    scale: float,
) -> torch.Tensor:
    """Every block position attends to its request's whole cached context and, without a
    causal mask, to its own block. Returns [n, num_heads, D]. No forward context needed:
    the backend's forward is this call plus a copy into vLLM's output buffer."""
    b, q_len = md.num_reqs, md.query_len
    n, num_heads, d = query.shape
    num_kv_heads = key.shape[1]
    q = query.reshape(b, q_len, num_heads, d).transpose(1, 2)
    blk_k = key.reshape(b, q_len, num_kv_heads, d)
    blk_v = value.reshape(b, q_len, num_kv_heads, d)
    ctx = kv_cache[md.ctx_block, :, md.ctx_offset].to(q.dtype)  # [b, max_ctx, nkv, 2D]
    kv = torch.cat([ctx, torch.cat([blk_k, blk_v], dim=-1)], dim=1).transpose(1, 2)  # [b, nkv, ctx+q, 2D]
    k, v = kv[..., :d], kv[..., d:]
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=md.key_mask, scale=scale, enable_gqa=num_heads != num_kv_heads
    )
    return out.transpose(1, 2).reshape(n, num_heads, d)


@dataclass
class DraftBlockMetadata(CommonAttentionMetadata):
    """What the proposer hands the drafter layers' metadata builder: vLLM's common metadata for
    the block queries, with ``seq_lens`` = context + block as vLLM's native DFlash sets them,
    plus the one thing our layout needs that vLLM's fields do not say: the context lengths."""

    context_lens: torch.Tensor | None = None  # [num_reqs] verified tokens before each block


@dataclass
class CpuKernelArgs:
    """What ``cpu_attention_with_kv_cache`` needs, built once per drafter forward."""

    isa: str
    query_start_loc: torch.Tensor  # [num_reqs + 1] int32
    seq_lens: torch.Tensor  # [num_reqs] int32: context + block
    block_table: torch.Tensor  # [num_reqs, max_blocks] int32
    block_slots: torch.Tensor  # [num_reqs * query_len] int64: the block positions' slots
    scheduler_metadata: torch.Tensor


def kernel_args(block_table, ctx_lens, query_start_loc, block_size: int, query_len: int, isa: str,
                num_heads: int, num_kv_heads: int, head_size: int, dtype: torch.dtype) -> CpuKernelArgs:
    """Slots and lengths for the block at positions ``ctx .. ctx + query_len - 1``. Positions
    past the block table's reach (a request within K of max_model_len) are clamped onto its
    last slot: drafts there can never be accepted, they only need a defined value."""
    from vllm import envs

    # Host arrays (the kernel is CPU-only: these tensors are in host memory): numpy's calls on
    # 1-64 rows cost ~1-2 us where torch's cost 5-15: 38-47 us a call against 54-65 hot at batch
    # 1-64, session 43).
    reach = block_table.shape[1] * block_size
    bt = block_table.numpy()
    cl = ctx_lens.numpy().astype(np.int64)
    pos = np.minimum(cl[:, None] + np.arange(query_len), reach - 1)
    slots = np.take_along_axis(bt, pos // block_size, axis=1).astype(np.int64) * block_size + pos % block_size
    seq_lens = torch.from_numpy(np.minimum(cl + query_len, reach).astype(np.int32))
    query_start_loc = torch.from_numpy(query_start_loc.numpy().astype(np.int32))
    block_table = block_table if block_table.dtype == torch.int32 and block_table.is_contiguous() else \
        torch.from_numpy(np.ascontiguousarray(bt, dtype=np.int32))
    # what vllm._custom_ops.cpu_attn_get_scheduler_metadata passes (no causal mask, no window)
    sched = _CPU_OPS[2](block_table.shape[0], num_heads, num_kv_heads, head_size, seq_lens, dtype, query_start_loc,
                        False, -1, isa, envs.VLLM_CPU_ATTN_SPLIT_KV, None, "auto")
    return CpuKernelArgs(isa, query_start_loc, seq_lens, block_table, torch.from_numpy(slots.reshape(-1)), sched)


def dflash_attention_cpu_kernel(query, key, value, kv_cache, args: CpuKernelArgs, scale: float, out: torch.Tensor) -> None:
    """The CPU-kernel implementation: the block's K/V into their slots, then vLLM's paged
    attention without a causal mask, written into ``out`` [n, num_heads, D]."""
    key_cache, value_cache = _kernel_caches(kv_cache)
    reshape_and_cache, attention = _CPU_OPS[0], _CPU_OPS[1]
    reshape_and_cache(key.contiguous(), value.contiguous(), key_cache, value_cache, args.block_slots, args.isa,
                      1.0, 1.0, "auto")
    # positional, as vllm._custom_ops.cpu_attention_with_kv_cache passes them: query, caches,
    # output, query_start_loc, seq_lens, scale, causal, alibi, window, block_table, softcap,
    # scheduler metadata, sinks, dynamic_causal, k_scale, v_scale, kv_cache_dtype
    attention(query, key_cache, value_cache, out, args.query_start_loc, args.seq_lens, scale, False, None, -1,
              args.block_table, 0.0, args.scheduler_metadata, None, None, 1.0, 1.0, "auto")


@dataclass
class DFlashAttentionMetadata:
    num_reqs: int
    num_actual_tokens: int
    query_len: int  # K + 1, the same for every request in a step
    ctx_block: torch.Tensor | None  # [num_reqs, max_ctx] physical block of each context position
    ctx_offset: torch.Tensor | None  # [num_reqs, max_ctx] offset inside that block
    key_mask: torch.Tensor | None  # [num_reqs, 1, 1, max_ctx + query_len] True = visible; None: all
    kernel: CpuKernelArgs | None = None  # set: vLLM's CPU kernel runs instead of the PyTorch path


class DFlashAttentionMetadataBuilder(AttentionMetadataBuilder[DFlashAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):  # abstract in the base class
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata, fast_build: bool = False):
        # The runner builds metadata for every KV cache group on each target step; drafter
        # layers do not run then, so there is nothing to prepare.
        return None

    def build_for_drafting(self, common_attn_metadata: CommonAttentionMetadata, draft_index: int):
        cad = common_attn_metadata
        if not isinstance(cad, DraftBlockMetadata) or cad.context_lens is None:
            raise TypeError("DFlash drafter attention needs DraftBlockMetadata (with context_lens) from our proposer")
        num_reqs, num_tokens = cad.num_reqs, cad.num_actual_tokens
        query_len = cad.max_query_len
        if num_tokens != num_reqs * query_len:
            raise ValueError("DFlash drafter attention expects the same block length for every request")
        ctx_lens = cad.context_lens[:num_reqs]
        block_table = cad.block_table_tensor[:num_reqs]
        layer = self._layer()
        # Kernel blocks may be smaller than manager blocks; the table we get is in kernel units
        # (the layer caches carry the kernel block size as their dim 2).
        bs = layer.kv_cache.shape[2] if layer is not None else self.kv_cache_spec.block_size
        isa = None if layer is None else cpu_kernel_isa(layer.kv_cache, layer.impl.head_size)
        if isa is not None:
            impl = layer.impl
            args = kernel_args(block_table, ctx_lens, cad.query_start_loc[: num_reqs + 1], bs, query_len,
                               isa, impl.num_heads, impl.num_kv_heads, impl.head_size, layer.kv_cache.dtype)
            return DFlashAttentionMetadata(num_reqs, num_tokens, query_len, None, None, None, args)
        # On CPU exact lengths cost no device sync; on a GPU take vLLM's upper bound (the
        # rejected tail included) and mask.
        max_ctx = None if block_table.device.type == "cpu" else max(1, int(cad.max_seq_len) - query_len)
        ctx_block, ctx_offset, key_mask = context_index(block_table, ctx_lens, bs, query_len, max_ctx)
        return DFlashAttentionMetadata(num_reqs, num_tokens, query_len, ctx_block, ctx_offset, key_mask)

    def _layer(self):
        """One drafter attention layer with its cache bound (all share shapes), or None before that."""
        from vllm.config import get_layers_from_vllm_config
        from vllm.model_executor.layers.attention import Attention

        if getattr(self, "_one_layer", None) is None:
            layers = get_layers_from_vllm_config(self.vllm_config, Attention, self.layer_names)
            bound = [l for l in layers.values() if isinstance(l.kv_cache, torch.Tensor) and l.kv_cache.dim() == 4]
            self._one_layer = bound[0] if bound else None
            if bound:  # once, when the caches are bound: which implementation this engine runs
                from vllm.logger import init_logger

                isa = cpu_kernel_isa(bound[0].kv_cache, bound[0].impl.head_size)
                init_logger("vllm.dflash_vllm.attention").info(
                    "dflash-vllm: drafter attention runs %s", f"vLLM's paged CPU kernel in place (isa {isa})"
                    if isa is not None else "the PyTorch path (context gathered per step)")
        return self._one_layer


class DFlashAttentionImpl(AttentionImpl):
    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int,
        alibi_slopes=None,
        sliding_window=None,
        kv_cache_dtype: str = "auto",
        logits_soft_cap=None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name=None,
        **kwargs,
    ):
        if alibi_slopes is not None or sliding_window is not None or logits_soft_cap:
            raise NotImplementedError("DFlash drafter attention supports no ALiBi, sliding window or soft-cap")
        self.num_heads, self.head_size, self.scale, self.num_kv_heads = num_heads, head_size, float(scale), num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = None

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None, output_block_scale=None):
        if attn_metadata is None:  # profiling / warm-up
            return output
        md: DFlashAttentionMetadata = attn_metadata
        n, d = md.num_actual_tokens, self.head_size
        if md.kernel is not None:
            return self.kernel_forward(query, key, value, kv_cache, md, output)
        out = dflash_attention(
            query[:n].reshape(n, self.num_heads, d),
            key[:n].reshape(n, self.num_kv_heads, d),
            value[:n].reshape(n, self.num_kv_heads, d),
            kv_cache, md, self.scale,
        )
        output[:n].view(n, -1).copy_(out.reshape(n, -1))
        return output

    def kernel_forward(self, query, key, value, kv_cache, md: "DFlashAttentionMetadata", output):
        """``forward`` where ``md`` runs vLLM's CPU kernel (``md.kernel``); the drafter's layers call
        it directly (``DrafterAttention._attend``)."""
        n, d = md.num_actual_tokens, self.head_size
        dflash_attention_cpu_kernel(
            query[:n].reshape(n, self.num_heads, d), key[:n].reshape(n, self.num_kv_heads, d),
            value[:n].reshape(n, self.num_kv_heads, d), kv_cache, md.kernel, self.scale,
            output[:n].view(n, self.num_heads, d))
        return output


class DFlashAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = True  # the block's K/V stay out of the cache

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto", "float16", "bfloat16", "float32"]

    @staticmethod
    def get_name() -> str:
        return BACKEND_NAME

    @staticmethod
    def get_impl_cls():
        return DFlashAttentionImpl

    @staticmethod
    def get_builder_cls():
        return DFlashAttentionMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        return [MultipleOf(1)]

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return []  # any

    @classmethod
    def supports_head_size(cls, head_size: int) -> bool:
        return head_size % 2 == 0

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        return tuple(KVCacheLayout)

    @classmethod
    def supports_non_causal(cls) -> bool:
        return True
