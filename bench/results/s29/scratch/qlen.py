import sys, torch
sys.path.insert(0, "tests/unit")
import test_backend_ops as T
from dflash_vllm import envs
import os
os.environ.pop(envs.CPU_ATTN.name, None)
for ql in (1, 2, 3, 4, 8, 16):
    T.QUERY_LEN = ql
    for bs in (16, 128):
        for lens in (T.MIXED_LENS, [37], [37, 90], [5, 300, 17, 64]):
            kv_cache, _, block_table, ctx_k, ctx_v = T.make_paged_cache(lens, bs, layout="HND", seed=bs, lookahead=ql)
            b = len(lens)
            q, blk_k, blk_v = T.random_block(b)
            scale = T.HEAD_DIM ** -0.5
            got, args = T.run_cpu_kernel(kv_cache, block_table, lens, bs, q, blk_k, blk_v, scale)
            want = T.dense_reference(q, blk_k, blk_v, ctx_k, ctx_v, scale)
            err = (got.double() - want).abs().max().item()
            print(f"qlen {ql} bs {bs} batch {b}: max err {err:.2e}", "BAD" if err > 1e-3 else "")
