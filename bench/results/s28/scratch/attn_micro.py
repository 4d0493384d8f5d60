"""Scratch (session 28): vLLM's CPU paged attention kernel as the drafter calls it (16 queries, 4 heads / 2 KV heads, head 64, block 128) at one context length, 2 and 1 threads, query tokens split into pseudo-requests. Usage: python attn_micro.py CTX BATCH."""
import sys, time, torch
from dflash_vllm.attention.backend import cpu_kernel_isa, _CPU_OPS, _kernel_caches
from vllm import envs
torch.manual_seed(0)
nh, nkv, D, bs = 4, 2, 64, 128
ctx = int(sys.argv[1]); B = int(sys.argv[2]); q = 16
nblk_req = (ctx + q + bs - 1) // bs
nblocks = 1 + B * nblk_req
kv = torch.randn(nblocks, nkv, bs, 2 * D)
isa = cpu_kernel_isa(kv, D); print("isa", isa)
kc, vc = _kernel_caches(kv)
bt = (1 + torch.arange(B * nblk_req)).view(B, nblk_req).to(torch.int32)
def args(split):
    # split each request's q tokens into `split` pseudo-requests sharing its table
    n = B * split
    qsl = torch.arange(0, n + 1, dtype=torch.int32) * (q // split)
    sl = torch.full((n,), ctx + q, dtype=torch.int32)
    tbl = bt.repeat_interleave(split, 0).contiguous()
    sched = _CPU_OPS[2](n, nh, nkv, D, sl, torch.float32, qsl, False, -1, isa, envs.VLLM_CPU_ATTN_SPLIT_KV, None, "auto")
    return qsl, sl, tbl, sched
Q = torch.randn(B * q, nh, D)
def run(a, out):
    qsl, sl, tbl, sched = a
    _CPU_OPS[1](Q, kc, vc, out, qsl, sl, 0.125, False, None, -1, tbl, 0.0, sched, None, None, 1.0, 1.0, "auto")
for th in (2, 1):
    torch.set_num_threads(th)
    res = {}
    outs = {}
    for split in (1, 2, 4, 16):
        a = args(split); out = torch.empty(B * q, nh, D)
        for _ in range(3): run(a, out)
        best = 1e9
        for r in range(5):
            t = time.perf_counter()
            for _ in range(20): run(a, out)
            best = min(best, (time.perf_counter() - t) / 20)
        res[split] = best * 1e3; outs[split] = out.clone()
    print(f"threads {th} ctx {ctx} B {B}: " + ", ".join(f"split{s} {v:.3f} ms" for s, v in res.items()),
          "maxdiff", max((outs[s] - outs[1]).abs().max().item() for s in outs))
