"""The drafter attention backend's ops against a dense float64 reference, on a synthetic paged
cache, without an engine: random block tables, mixed context lengths (1 .. a few thousand),
GQA, block sizes 16/32/128, both ways the builder sizes the context (exact lengths on CPU, an
upper bound plus a mask on a GPU), and both physical KV layouts vLLM may pick.

What is called is what the engine runs: ``write_kv`` fills the cache (padding slots
included), ``context_index`` / ``kernel_args`` are the metadata builder's, and the attention
goes through ``DFlashAttentionImpl.forward``. Both implementations are checked: the PyTorch
path (CUDA, and CPU with ``DFLASH_VLLM_CPU_ATTN=0``) and vLLM's paged CPU kernel (the CPU
default), each against the same reference.
"""

import math

import pytest
import torch

from dflash_vllm import envs
from dflash_vllm.attention.backend import (
    NULL_SLOT,
    DFlashAttentionImpl,
    DFlashAttentionMetadata,
    context_index,
    cpu_kernel_isa,
    dflash_attention,
    kernel_args,
    write_kv,
)

pytestmark = pytest.mark.unit

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 9, 3, 64
QUERY_LEN = 8  # the block: anchor + 7 masks
MIXED_LENS = [1, 37, 300, 2500, 16]
GARBAGE = 50.0  # scale of the stale values every unused slot holds


@pytest.fixture(autouse=True)
def torch_path(monkeypatch):
    """The PyTorch path unless a test asks for the CPU kernel (it unsets the variable)."""
    monkeypatch.setenv(envs.CPU_ATTN.name, "0")


def random_block(num_reqs, seed=1):
    """Queries and the block's own keys/values, [num_reqs, QUERY_LEN, heads, HEAD_DIM]."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(num_reqs, QUERY_LEN, NUM_HEADS, HEAD_DIM, generator=g)
    blk_k = torch.randn(num_reqs, QUERY_LEN, NUM_KV_HEADS, HEAD_DIM, generator=g)
    blk_v = torch.randn(num_reqs, QUERY_LEN, NUM_KV_HEADS, HEAD_DIM, generator=g)
    return q, blk_k, blk_v


def make_paged_cache(ctx_lens, block_size, *, layout, seed, extra_cols=3, spare_blocks=5, lookahead=0):
    """Random per-request context K/V, a random block table (block 0 = vLLM's null block, never
    handed out; unused table entries point there) and a cache full of garbage with the
    context scattered into it by ``write_kv``, in shuffled order and mixed with padding slots.
    ``lookahead``: slots allocated past each context, as vLLM reserves K + 1 for DFlash."""
    g = torch.Generator().manual_seed(seed)
    num_reqs = len(ctx_lens)
    blocks_per_req = [math.ceil((n + lookahead) / block_size) for n in ctx_lens]
    num_blocks = 1 + sum(blocks_per_req) + spare_blocks
    perm = (torch.randperm(num_blocks - 1, generator=g) + 1).tolist()
    block_table = torch.zeros(num_reqs, max(blocks_per_req) + extra_cols, dtype=torch.int32)
    for r, nb in enumerate(blocks_per_req):
        block_table[r, :nb] = torch.tensor([perm.pop() for _ in range(nb)], dtype=torch.int32)

    if layout == "NHD":  # physical [blocks, block_size, heads, 2D], viewed as vLLM hands it to us
        storage = torch.empty(num_blocks, block_size, NUM_KV_HEADS, 2 * HEAD_DIM)
        kv_cache = storage.permute(0, 2, 1, 3)
    else:  # "HND": physical order = logical order
        kv_cache = torch.empty(num_blocks, NUM_KV_HEADS, block_size, 2 * HEAD_DIM)
    assert kv_cache.shape == (num_blocks, NUM_KV_HEADS, block_size, 2 * HEAD_DIM)
    kv_cache.copy_(GARBAGE * torch.randn(kv_cache.shape, generator=g))

    ctx_k = [torch.randn(n, NUM_KV_HEADS, HEAD_DIM, generator=g) for n in ctx_lens]
    ctx_v = [torch.randn(n, NUM_KV_HEADS, HEAD_DIM, generator=g) for n in ctx_lens]
    slots = []
    for r, n in enumerate(ctx_lens):
        pos = torch.arange(n)
        slots.append(block_table[r, pos // block_size].long() * block_size + pos % block_size)
    slots, keys, values = torch.cat(slots), torch.cat(ctx_k), torch.cat(ctx_v)
    # Padding rows (slot -1) carrying huge values: they must land in the null block only.
    num_pad = 11
    slots = torch.cat([slots, torch.full((num_pad,), -1, dtype=torch.long)])
    keys = torch.cat([keys, torch.full((num_pad, NUM_KV_HEADS, HEAD_DIM), 1e4)])
    values = torch.cat([values, torch.full((num_pad, NUM_KV_HEADS, HEAD_DIM), 1e4)])
    order = torch.randperm(slots.shape[0], generator=g)
    before = kv_cache.clone()
    # Two writes, as over two engine steps.
    half = order.shape[0] // 2
    for idx in (order[:half], order[half:]):
        write_kv(kv_cache, keys[idx], values[idx], slots[idx])
    return kv_cache, before, block_table, ctx_k, ctx_v


def dense_reference(q, blk_k, blk_v, ctx_k, ctx_v, scale):
    """Plain softmax attention in float64 from the unpaged K/V: each request's block sees all of
    its context and all of its block (no causal mask). q [b, Q, H, D]; returns [b, Q, H, D]."""
    group = NUM_HEADS // NUM_KV_HEADS
    out = []
    for r in range(q.shape[0]):
        k = torch.cat([ctx_k[r], blk_k[r]]).double()  # [C + Q, nkv, D]
        v = torch.cat([ctx_v[r], blk_v[r]]).double()
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # query head h -> kv head h // group
        scores = torch.einsum("qhd,khd->hqk", q[r].double(), k) * scale
        out.append(torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), v))
    return torch.stack(out)


def run_backend(kv_cache, block_table, ctx_lens, block_size, max_ctx, q, blk_k, blk_v, scale):
    b = q.shape[0]
    n = b * QUERY_LEN
    ctx_block, ctx_offset, key_mask = context_index(
        block_table, torch.tensor(ctx_lens, dtype=torch.int32), block_size, QUERY_LEN, max_ctx
    )
    md = DFlashAttentionMetadata(b, n, QUERY_LEN, ctx_block, ctx_offset, key_mask)
    query, key, value, out = forward_padded(md, kv_cache, q, blk_k, blk_v, scale)
    # The pure function is what forward runs.
    direct = dflash_attention(query[:n], key[:n], value[:n], kv_cache, md, scale)
    torch.testing.assert_close(out, direct, rtol=0, atol=0)
    return out.view(b, QUERY_LEN, NUM_HEADS, HEAD_DIM), md


def forward_padded(md, kv_cache, q, blk_k, blk_v, scale):
    """``DFlashAttentionImpl.forward`` as vLLM calls it: [tokens, heads, D] inputs with padding
    rows past ``num_actual_tokens`` and a padded output buffer, which must stay untouched there.
    Returns the padded inputs and the output rows that count."""
    n, pad = md.num_actual_tokens, 3
    impl = DFlashAttentionImpl(NUM_HEADS, HEAD_DIM, scale, NUM_KV_HEADS)
    query = torch.cat([q.reshape(n, NUM_HEADS, HEAD_DIM), torch.randn(pad, NUM_HEADS, HEAD_DIM)])
    key = torch.cat([blk_k.reshape(n, NUM_KV_HEADS, HEAD_DIM), torch.randn(pad, NUM_KV_HEADS, HEAD_DIM)])
    value = torch.cat([blk_v.reshape(n, NUM_KV_HEADS, HEAD_DIM), torch.randn(pad, NUM_KV_HEADS, HEAD_DIM)])
    output = torch.full((n + pad, NUM_HEADS, HEAD_DIM), float("nan"))
    impl.forward(None, query, key, value, kv_cache, md, output)
    assert output[n:].isnan().all(), "the backend wrote past num_actual_tokens"
    return query, key, value, output[:n]


@pytest.mark.parametrize("block_size", [16, 32, 128])
@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("sizing", ["exact", "upper_bound"])
def test_attention_matches_dense_reference(block_size, layout, sizing):
    ctx_lens = MIXED_LENS
    kv_cache, before, block_table, ctx_k, ctx_v = make_paged_cache(ctx_lens, block_size, layout=layout, seed=block_size)
    b = len(ctx_lens)
    q, blk_k, blk_v = random_block(b)
    scale = HEAD_DIM**-0.5
    # "exact": the CPU builder (lengths read on the host); "upper_bound": the GPU builder
    # (vLLM's max_seq_len, which still counts the rejected tail: masked).
    max_ctx = None if sizing == "exact" else max(ctx_lens) + 13
    got, md = run_backend(kv_cache, block_table, ctx_lens, block_size, max_ctx, q, blk_k, blk_v, scale)
    assert md.key_mask is not None  # mixed lengths always need a mask
    want = dense_reference(q, blk_k, blk_v, ctx_k, ctx_v, scale)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("block_size", [16, 128])
def test_uniform_lengths_need_no_mask(block_size):
    ctx_lens = [1000, 1000, 1000]
    kv_cache, _, block_table, ctx_k, ctx_v = make_paged_cache(ctx_lens, block_size, layout="HND", seed=3)
    g = torch.Generator().manual_seed(2)
    q = torch.randn(3, QUERY_LEN, NUM_HEADS, HEAD_DIM, generator=g)
    blk_k = torch.randn(3, QUERY_LEN, NUM_KV_HEADS, HEAD_DIM, generator=g)
    blk_v = torch.randn(3, QUERY_LEN, NUM_KV_HEADS, HEAD_DIM, generator=g)
    got, md = run_backend(kv_cache, block_table, ctx_lens, block_size, None, q, blk_k, blk_v, 0.1)
    assert md.key_mask is None and md.ctx_block.shape == (3, 1000)
    want = dense_reference(q, blk_k, blk_v, ctx_k, ctx_v, 0.1)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("block_size", [16, 32, 128])
def test_write_kv_places_tokens_and_sends_padding_to_the_null_block(block_size):
    ctx_lens = MIXED_LENS
    kv_cache, before, block_table, ctx_k, ctx_v = make_paged_cache(ctx_lens, block_size, layout="NHD", seed=7)
    written = torch.zeros(kv_cache.shape[0], kv_cache.shape[2], dtype=torch.bool)  # [block, offset]
    for r, n in enumerate(ctx_lens):
        pos = torch.arange(n)
        blk, off = block_table[r, pos // block_size].long(), pos % block_size
        got = kv_cache[blk, :, off]  # [n, nkv, 2D]
        torch.testing.assert_close(got[..., :HEAD_DIM], ctx_k[r], rtol=0, atol=0)
        torch.testing.assert_close(got[..., HEAD_DIM:], ctx_v[r], rtol=0, atol=0)
        written[blk, off] = True
    null_blk, null_off = NULL_SLOT // block_size, NULL_SLOT % block_size
    assert not written[null_blk].any(), "a request was given the null block"
    written[null_blk, null_off] = True  # the padding rows' sink
    untouched = ~written
    torch.testing.assert_close(
        kv_cache.permute(0, 2, 1, 3)[untouched], before.permute(0, 2, 1, 3)[untouched], rtol=0, atol=0
    )
    assert (kv_cache[null_blk, :, null_off] == 1e4).all()


def test_write_kv_skips_an_unbound_cache():
    write_kv(torch.tensor([]), torch.ones(2, 1, 4), torch.ones(2, 1, 4), torch.tensor([0, 1]))


def test_context_index_masks_past_each_length():
    block_table = torch.tensor([[3, 1, 0], [2, 0, 0]], dtype=torch.int32)
    ctx_block, ctx_offset, key_mask = context_index(block_table, torch.tensor([5, 2]), 4, 2, max_ctx=6)
    assert ctx_block.tolist() == [[3, 3, 3, 3, 1, 1], [2, 2, 2, 2, 0, 0]]
    assert ctx_offset.tolist() == [[0, 1, 2, 3, 0, 1]] * 2
    assert key_mask[:, 0, 0].tolist() == [
        [True] * 5 + [False] + [True] * 2,
        [True] * 2 + [False] * 4 + [True] * 2,
    ]


# -- vLLM's paged CPU kernel (the CPU default) ----------------------------------------------


def run_cpu_kernel(kv_cache, block_table, ctx_lens, block_size, q, blk_k, blk_v, scale):
    b = q.shape[0]
    n = b * QUERY_LEN
    isa = cpu_kernel_isa(kv_cache, HEAD_DIM)
    assert isa is not None, "the CPU kernel should serve this cache"
    args = kernel_args(block_table, torch.tensor(ctx_lens, dtype=torch.int32), torch.arange(b + 1) * QUERY_LEN,
                       block_size, QUERY_LEN, isa, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, kv_cache.dtype)
    md = DFlashAttentionMetadata(b, n, QUERY_LEN, None, None, None, args)
    out = forward_padded(md, kv_cache, q, blk_k, blk_v, scale)[3]
    return out.view(b, QUERY_LEN, NUM_HEADS, HEAD_DIM), args


@pytest.mark.parametrize("block_size", [16, 32, 128])
def test_cpu_kernel_matches_dense_reference(block_size, monkeypatch):
    """Mixed lengths 1..2500, GQA: the kernel path equals the reference, and the only cache
    entries the attention changed are the block's own slots (the K + 1 reserved ones)."""
    monkeypatch.delenv(envs.CPU_ATTN.name)
    ctx_lens = MIXED_LENS
    kv_cache, _, block_table, ctx_k, ctx_v = make_paged_cache(
        ctx_lens, block_size, layout="HND", seed=block_size, lookahead=QUERY_LEN)
    b = len(ctx_lens)
    q, blk_k, blk_v = random_block(b)
    scale = HEAD_DIM**-0.5
    before = kv_cache.clone()
    got, args = run_cpu_kernel(kv_cache, block_table, ctx_lens, block_size, q, blk_k, blk_v, scale)
    want = dense_reference(q, blk_k, blk_v, ctx_k, ctx_v, scale)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=2e-5)
    # Slots the block wrote: positions ctx .. ctx + Q - 1 of each request, nothing else.
    expected_slots = torch.cat([block_table[r, (pos := torch.arange(n, n + QUERY_LEN)) // block_size].long() * block_size
                                + pos % block_size for r, n in enumerate(ctx_lens)])
    assert torch.equal(args.block_slots, expected_slots)
    changed = (kv_cache != before).flatten(1).any(dim=1)  # per block
    touched_blocks = set((expected_slots // block_size).tolist())
    assert set(changed.nonzero().flatten().tolist()) <= touched_blocks
    # A second call with the same inputs gives the same result (scratch overwritten, not accumulated).
    again, _ = run_cpu_kernel(kv_cache, block_table, ctx_lens, block_size, q, blk_k, blk_v, scale)
    torch.testing.assert_close(again, got, rtol=0, atol=0)


def test_cpu_kernel_near_the_block_tables_reach(monkeypatch):
    """A request within K of the table's reach (near max_model_len): its block positions are
    clamped onto the last slot, it attends over what fits, and the other requests are exact."""
    monkeypatch.delenv(envs.CPU_ATTN.name)
    block_size = 32
    ctx_lens = [60, 220]
    kv_cache, _, block_table, ctx_k, ctx_v = make_paged_cache(
        ctx_lens, block_size, layout="HND", seed=5, lookahead=QUERY_LEN, extra_cols=0)
    block_table = block_table[:, :7]  # reach 224 < 220 + 8 for request 1
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, QUERY_LEN, NUM_HEADS, HEAD_DIM, generator=g)
    blk_k = torch.randn(2, QUERY_LEN, NUM_KV_HEADS, HEAD_DIM, generator=g)
    blk_v = torch.randn(2, QUERY_LEN, NUM_KV_HEADS, HEAD_DIM, generator=g)
    got, args = run_cpu_kernel(kv_cache, block_table, ctx_lens, block_size, q, blk_k, blk_v, HEAD_DIM**-0.5)
    assert args.seq_lens.tolist() == [60 + QUERY_LEN, 224]
    assert got.isfinite().all()
    want = dense_reference(q[:1], blk_k[:1], blk_v[:1], ctx_k[:1], ctx_v[:1], HEAD_DIM**-0.5)
    torch.testing.assert_close(got[:1].double(), want, rtol=1e-4, atol=2e-5)


def test_cpu_kernel_declines_what_it_cannot_serve(monkeypatch):
    monkeypatch.delenv(envs.CPU_ATTN.name)
    cache = torch.zeros(4, NUM_KV_HEADS, 32, 2 * HEAD_DIM)
    assert cpu_kernel_isa(cache, HEAD_DIM) is not None
    assert cpu_kernel_isa(cache.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3), HEAD_DIM) is None  # not head-major
    assert cpu_kernel_isa(torch.zeros(4, NUM_KV_HEADS, 32, 2 * 24), 24) is None  # head size
    assert cpu_kernel_isa(torch.zeros(4, NUM_KV_HEADS, 8, 2 * HEAD_DIM), HEAD_DIM) is None  # block size
    assert cpu_kernel_isa(torch.tensor([]), HEAD_DIM) is None  # not bound yet
    monkeypatch.setenv(envs.CPU_ATTN.name, "0")
    assert cpu_kernel_isa(cache, HEAD_DIM) is None
