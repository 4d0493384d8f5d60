"""Session 43 (#12). Same-run A/B of one change to the drafting call, alternating per drafting
call on one in-process engine at fixed K = 15 (demo pair, tasks prompts): the mean wall time of
forward_block and of the whole drafting call under each side.
- ``attend``: vLLM's Attention.forward (the opaque custom op) against our direct kernel call
  (DrafterAttention._attend);
- ``kargs``: the metadata's kernel_args in torch (as at 26e23ed) against numpy.

    python bench/results/s43/scratch/attend_ab.py CONCURRENCY [attend|kargs]
"""
import os, sys, time

def main():
    c = int(sys.argv[1])
    from _engine import engine_at
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    import dflash_vllm.models.drafter as M
    engine, runner, reqs, n = engine_at(15, c, "tasks")
    m = runner.drafter.model
    mode = {"direct": True}
    which = sys.argv[2] if len(sys.argv) > 2 else "attend"
    if which == "attend":
        direct = M.DrafterAttention._attend
        M.DrafterAttention._attend = lambda self, q, k, v: direct(self, q, k, v) if mode["direct"] else self.attn(q, k, v)
    else:
        import torch
        import dflash_vllm.attention.backend as B
        new = B.kernel_args
        def old(block_table, ctx_lens, query_start_loc, block_size, query_len, isa, num_heads, num_kv_heads, head_size, dtype):
            from vllm import envs
            reach = block_table.shape[1] * block_size
            ctx_lens = ctx_lens.to(torch.int64)
            pos = (ctx_lens[:, None] + torch.arange(query_len)).clamp_max(reach - 1)
            slots = block_table.gather(1, pos // block_size).to(torch.int64) * block_size + pos % block_size
            seq_lens = (ctx_lens + query_len).clamp_max(reach).to(torch.int32)
            query_start_loc = query_start_loc.to(torch.int32)
            sched = B._CPU_OPS[2](block_table.shape[0], num_heads, num_kv_heads, head_size, seq_lens, dtype, query_start_loc,
                                  False, -1, isa, envs.VLLM_CPU_ATTN_SPLIT_KV, None, "auto")
            return B.CpuKernelArgs(isa, query_start_loc, seq_lens, block_table.to(torch.int32), slots.reshape(-1), sched)
        B.kernel_args = lambda *a: new(*a) if mode["direct"] else old(*a)
    sums = {True: [0.0, 0.0, 0], False: [0.0, 0.0, 0]}
    fb, prop = m.forward_block, runner.propose_draft_token_ids
    def forward_block(*a, **k):
        s = time.perf_counter(); r = fb(*a, **k); sums[mode["direct"]][0] += time.perf_counter() - s; return r
    def propose(*a, **k):
        s = time.perf_counter(); r = prop(*a, **k); x = sums[mode["direct"]]; x[1] += time.perf_counter() - s; x[2] += 1
        mode["direct"] = not mode["direct"]
        return r
    m.forward_block, runner.propose_draft_token_ids = forward_block, propose
    drive(engine, reqs[:n], concurrency=c, id_prefix="warm-")
    for v in sums.values():
        v[:] = [0.0, 0.0, 0]
    drive(engine, reqs[n:], concurrency=c, id_prefix="s-")
    for d, (f, p, k) in sums.items():
        print(f"c={c} {which} {'new' if d else 'old'}: {k} drafting calls, forward_block "
              f"{1e6 * f / k:7.1f} us, drafting call {1e6 * p / k:7.1f} us")

if __name__ == "__main__":
    main()
