"""KV-injection attention for DFlash drafter layers (registered as vLLM's CUSTOM backend).

Layout, per request: queries are the K+1 block positions ``[anchor, mask x K]``; keys and
values are the drafter context (K/V projected from fused target features, in the paged
cache) followed by the block's own K/V; no causal mask anywhere (bidirectional in the block,
and every context position precedes the anchor).

The block's K/V are never written to the cache: they are scratch for this one forward, and
writing them would leave draft-derived K/V where only verified context may live.

Per-layer cache view, as vLLM allocates it: ``[num_blocks, num_kv_heads, block_size, 2 * D]``
with each token's K in ``[..., :D]`` and V in ``[..., D:]``. Indexing is stride-agnostic, so
every KV cache layout vLLM may pick works.

One implementation in plain PyTorch serves CPU (what CI runs) and CUDA (SDPA then dispatches
to its fused kernels). Context gathering is done once per step in the metadata builder and
shared by every drafter layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

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

BACKEND_NAME = "CUSTOM"
# vLLM's block 0 is its null block: never allocated to a request, so a safe sink for padding.
NULL_SLOT = 0


def write_kv(kv_cache: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Scatter key/value [N, nkv, D] into the paged cache at linear slots [N].

    Negative slots (padding: vLLM's ``PAD_SLOT_ID``) are redirected to ``NULL_SLOT`` in vLLM's
    null block instead of being filtered out, so the slots are never inspected on the host
    (no device sync). Only masked key positions ever read the null block.
    """
    if kv_cache.numel() == 0:  # not bound yet (profiling run)
        return
    slot_mapping = slot_mapping.clamp_min(NULL_SLOT)
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
class DFlashAttentionMetadata:
    num_reqs: int
    num_actual_tokens: int
    query_len: int  # K + 1, the same for every request in a step
    ctx_block: torch.Tensor  # [num_reqs, max_ctx] physical block of each context position
    ctx_offset: torch.Tensor  # [num_reqs, max_ctx] offset inside that block
    key_mask: torch.Tensor | None  # [num_reqs, 1, 1, max_ctx + query_len] True = visible; None: all


class DFlashAttentionMetadataBuilder(AttentionMetadataBuilder[DFlashAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):  # abstract in the base class
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata, fast_build: bool = False):
        # The runner builds metadata for every KV cache group on each target step; drafter
        # layers do not run then, so there is nothing to prepare.
        return None

    def build_for_drafting(self, common_attn_metadata: CommonAttentionMetadata, draft_index: int):
        """``seq_lens`` here are the *context* lengths (verified tokens), not context + block."""
        cad = common_attn_metadata
        num_reqs, num_tokens = cad.num_reqs, cad.num_actual_tokens
        query_len = cad.max_query_len
        if num_tokens != num_reqs * query_len:
            raise ValueError("DFlash drafter attention expects the same block length for every request")
        block_table = cad.block_table_tensor[:num_reqs]
        # On CPU exact lengths cost no device sync; on a GPU take vLLM's upper bound (the
        # rejected tail included) and mask.
        max_ctx = None if block_table.device.type == "cpu" else max(1, int(cad.max_seq_len))
        # Kernel blocks may be smaller than manager blocks; the table we get is in kernel units.
        bs = self._kernel_block_size(self.kv_cache_spec.block_size)
        ctx_block, ctx_offset, key_mask = context_index(block_table, cad.seq_lens[:num_reqs], bs, query_len, max_ctx)
        return DFlashAttentionMetadata(num_reqs, num_tokens, query_len, ctx_block, ctx_offset, key_mask)

    def _kernel_block_size(self, default: int) -> int:
        # The layer caches carry the kernel block size as their dim 2; read it from one.
        from vllm.config import get_layers_from_vllm_config
        from vllm.model_executor.layers.attention import Attention

        if not hasattr(self, "_bs_cache"):
            layers = get_layers_from_vllm_config(self.vllm_config, Attention, self.layer_names)
            caches = [l.kv_cache for l in layers.values() if isinstance(l.kv_cache, torch.Tensor) and l.kv_cache.dim() == 4]
            if not caches:
                return default
            self._bs_cache = caches[0].shape[2]
        return self._bs_cache


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
        out = dflash_attention(
            query[:n].reshape(n, self.num_heads, d),
            key[:n].reshape(n, self.num_kv_heads, d),
            value[:n].reshape(n, self.num_kv_heads, d),
            kv_cache, md, self.scale,
        )
        output[:n].view(n, -1).copy_(out.reshape(n, -1))
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
