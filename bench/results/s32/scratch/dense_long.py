"""Scratch (session 32): vLLM's CPU paged attention kernel (as the drafter calls it: 16 queries,
4 heads / 2 KV heads, head 64, block 128) against reading the same kernel-layout cache densely
(gather the request's blocks, SDPA without a mask), at one context length and batch; and, for the
bound, the two GEMMs and softmax over K/V already contiguous, one copy of K out of the pages, and
the machine's fp32 GEMM rate (2048^3).
Usage: python dense_long.py CTX BATCH [THREADS]."""
import sys, time, torch
import torch.nn.functional as F
from dflash_vllm.attention.backend import cpu_kernel_isa, _CPU_OPS, _kernel_caches
from vllm import envs
torch.manual_seed(0)
nh, nkv, D, bs, q = 4, 2, 64, 128, 16
ctx, B = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 2)
L = ctx + q
nblk = (L + bs - 1) // bs
nblocks = 1 + B * nblk + 7
kv = torch.zeros(nblocks, nkv, bs, 2 * D)
isa = cpu_kernel_isa(kv, D)
kc, vc = _kernel_caches(kv)
perm = 1 + torch.randperm(nblocks - 1)[: B * nblk]  # scattered blocks, as after churn
bt = perm.view(B, nblk).to(torch.int32)
pos = torch.arange(L)
slots = (bt[:, pos // bs].long() * bs + pos % bs).reshape(-1)
K = torch.randn(B * L, nkv, D); V = torch.randn(B * L, nkv, D)
_CPU_OPS[0](K, V, kc, vc, slots, isa, 1.0, 1.0, "auto")
qsl = torch.arange(B + 1, dtype=torch.int32) * q
sl = torch.full((B,), L, dtype=torch.int32)
sched = _CPU_OPS[2](B, nh, nkv, D, sl, torch.float32, qsl, False, -1, isa, envs.VLLM_CPU_ATTN_SPLIT_KV, None, "auto")
Q = torch.randn(B * q, nh, D)
out = torch.empty(B * q, nh, D)
def kernel():
    _CPU_OPS[1](Q, kc, vc, out, qsl, sl, 0.125, False, None, -1, bt, 0.0, sched, None, None, 1.0, 1.0, "auto")
    return out
# layout check: is the kernel cache [blocks, nkv, bs, D] plain?
plain = torch.equal(kc[bt[0, 0], :, 0], K[0]) and torch.equal(vc[bt[0, 0], :, 1], V[1])
idx = bt.long()
def dense():
    k = kc[idx].permute(0, 2, 1, 3, 4).reshape(B, nkv, nblk * bs, D)[:, :, :L]  # [B, nkv, L, D]
    v = vc[idx].permute(0, 2, 1, 3, 4).reshape(B, nkv, nblk * bs, D)[:, :, :L]
    qq = Q.view(B, q, nh, D).transpose(1, 2)
    o = F.scaled_dot_product_attention(qq, k, v, scale=0.125, enable_gqa=True)
    return o.transpose(1, 2).reshape(B * q, nh, D)
kq, kk, kvv = torch.randn(B * nkv, 2 * q, D), torch.randn(B * nkv, L, D), torch.randn(B * nkv, L, D)
def contiguous():  # GQA: the 2 query heads of a KV head as one 32-row block
    return torch.bmm(torch.softmax(torch.bmm(kq, kk.transpose(1, 2)) * 0.125, -1), kvv)
def copy_k():
    return kc[idx]
ga, gb = torch.randn(2048, 2048), torch.randn(2048, 2048)
def timeit(f, reps=20):
    for _ in range(3): f()
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps): f()
        best = min(best, (time.perf_counter() - t) / reps)
    return best * 1e3
a = kernel().clone(); b = dense()
print(f"isa {isa} plain layout {plain} ctx {ctx} B {B} threads {torch.get_num_threads()}: kernel {timeit(kernel):.3f} ms, "
      f"dense {timeit(dense):.3f} ms (maxdiff {(a - b).abs().max().item():.2e}: the kernel's layout is not plain, "
      f"timing only), contiguous GEMMs+softmax {timeit(contiguous):.3f} ms, K copied out of the pages "
      f"{timeit(copy_k):.3f} ms, GEMM {2 * 2048 ** 3 / timeit(lambda: ga @ gb, 5) / 1e6:.0f} GFLOP/s")
