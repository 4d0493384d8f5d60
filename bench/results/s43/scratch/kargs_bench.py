"""Session 43 (#12): kernel_args (the CPU kernel metadata) in torch, as at 26e23ed, against this
checkout's numpy version: the same tensors (the scheduler metadata aside: its padding bytes differ
between two calls of the same version), and the hot-loop time at batch 1, 8, 64.

    python bench/results/s43/scratch/kargs_bench.py
"""
import time, torch, numpy as np, sys

import dflash_vllm.attention.backend as B
from vllm import envs
def old(block_table, ctx_lens, query_start_loc, block_size, query_len, isa, num_heads, num_kv_heads, head_size, dtype):
    reach = block_table.shape[1] * block_size
    ctx_lens = ctx_lens.to(torch.int64)
    pos = (ctx_lens[:, None] + torch.arange(query_len)).clamp_max(reach - 1)
    slots = block_table.gather(1, pos // block_size).to(torch.int64) * block_size + pos % block_size
    seq_lens = (ctx_lens + query_len).clamp_max(reach).to(torch.int32)
    query_start_loc = query_start_loc.to(torch.int32)
    sched = B._CPU_OPS[2](block_table.shape[0], num_heads, num_kv_heads, head_size, seq_lens, dtype, query_start_loc,
                          False, -1, isa, envs.VLLM_CPU_ATTN_SPLIT_KV, None, "auto")
    return B.CpuKernelArgs(isa, query_start_loc, seq_lens, block_table.to(torch.int32), slots.reshape(-1), sched)
print("isa", B.cpu_kernel_isa(torch.zeros(4, 2, 16, 128), 64))
for b in (1, 8, 64):
    bt = torch.randint(0, 1000, (b, 64), dtype=torch.int32)
    cl = torch.randint(1, 900, (b,), dtype=torch.int32)
    qsl = torch.arange(b + 1, dtype=torch.int32) * 16
    args = (bt, cl, qsl, 16, 16, "vec", 4, 2, 64, torch.float32)
    x, y = old(*args), B.kernel_args(*args)
    print("sched old==old", torch.equal(old(*args).scheduler_metadata, x.scheduler_metadata), x.scheduler_metadata.shape, x.scheduler_metadata.dtype)
    for f in ("query_start_loc", "seq_lens", "block_table", "block_slots"):
        assert torch.equal(getattr(x, f), getattr(y, f)), f
    for f, name in ((old, "old"), (B.kernel_args, "new")):
        for _ in range(100): f(*args)
        s = time.perf_counter()
        for _ in range(3000): f(*args)
        print(f"batch {b} {name}: {1e6*(time.perf_counter()-s)/3000:.1f} us")
