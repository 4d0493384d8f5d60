"""Scratch (session 32): vLLM's CPU paged attention kernel at batch 1 with the block's 16 queries
as one request or as S pseudo-requests of 16/S queries each (same block table, same lengths; the
kernel splits a request's KV across threads only for single-query tiles). Blocks scattered.
Usage: python split_long.py CTX [THREADS]."""
import sys, time, torch
from dflash_vllm.attention.backend import cpu_kernel_isa, _CPU_OPS, _kernel_caches
from vllm import envs
torch.manual_seed(0)
nh, nkv, D, bs, q = 4, 2, 64, 128, 16
ctx = int(sys.argv[1])
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
L = ctx + q
nblk = (L + bs - 1) // bs
nblocks = 1 + nblk + 7
kv = torch.zeros(nblocks, nkv, bs, 2 * D)
isa = cpu_kernel_isa(kv, D)
kc, vc = _kernel_caches(kv)
bt = (1 + torch.randperm(nblocks - 1)[:nblk]).view(1, nblk).to(torch.int32)
pos = torch.arange(L)
slots = (bt[0, pos // bs].long() * bs + pos % bs)
_CPU_OPS[0](torch.randn(L, nkv, D), torch.randn(L, nkv, D), kc, vc, slots, isa, 1.0, 1.0, "auto")
Q = torch.randn(q, nh, D)
def make(split):
    n = split
    qsl = torch.arange(n + 1, dtype=torch.int32) * (q // split)
    sl = torch.full((n,), L, dtype=torch.int32)
    tbl = bt.expand(n, -1).contiguous()
    sched = _CPU_OPS[2](n, nh, nkv, D, sl, torch.float32, qsl, False, -1, isa, envs.VLLM_CPU_ATTN_SPLIT_KV, None, "auto")
    out = torch.empty(q, nh, D)
    def f():
        _CPU_OPS[1](Q, kc, vc, out, qsl, sl, 0.125, False, None, -1, tbl, 0.0, sched, None, None, 1.0, 1.0, "auto")
        return out
    return f
def timeit(f, reps=10):
    for _ in range(3): f()
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps): f()
        best = min(best, (time.perf_counter() - t) / reps)
    return best * 1e3
ref = make(1)().clone()
res = []
for s in (1, 2, 4, 8, 16):
    f = make(s)
    d = (f() - ref).abs().max().item()
    res.append(f"split{s} {timeit(f):.3f} ms (diff {d:.1e})")
print(f"isa {isa} ctx {ctx} threads {torch.get_num_threads()} split_kv {envs.VLLM_CPU_ATTN_SPLIT_KV}: " + ", ".join(res))
