"""Session 47 scratch (issue #10): line profile of a K = 0 step's host work in the proposer (the
drafting hook, the plan, the context queueing) on chat prompts at concurrency C, in-process, K
pinned to 0 or adaptive (dormant on chat).

    [SET=chat] python bench/results/s47/scratch/k0_lines.py [0|adaptive] [C] [REQUESTS]
"""
import os
import sys
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    a = sys.argv[1:] + [None] * 3
    mode, conc, n = a[0] or "0", int(a[1] or 1), int(a[2] or 48)
    from line_profiler import LineProfiler
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths, adaptive, metrics
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.proposers import dflash
    from dflash_vllm.prompts import prompt_set
    envs.set(envs.FIXED_K, mode)
    llm = P._engine(P._spec(), max(8, conc))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    ids = prompt_set(os.environ.get("SET", "chat"), tok, n)[1]
    reqs = [{"prompt_token_ids": ids[i % len(ids)], "max_tokens": 160, "stop_token_ids": [tok.eos_token_id],
             "ignore_eos": False} for i in range(n)]
    engine = llm.llm_engine
    drive(engine, reqs[:16], concurrency=conc, id_prefix="w-")
    lp = LineProfiler()
    Q = dflash.ContextQueue
    for f in (dflash.DFlashProposer._plan, dflash.DFlashProposer._plan_then_propose, dflash.DFlashProposer._idle_plan,
              dflash.DFlashProposer._skip_forward, dflash.DFlashProposer._write_context, dflash._queued_features,
              dflash.DFlashProposer._take_drafts, adaptive.AdaptivePolicy.plan, adaptive.AdaptivePolicy.idle_step,
              adaptive.AdaptivePolicy.closes_door, metrics.observe_draft_lengths, metrics.observe_undrafted,
              Q.add, Q.end, Q.schedule, Q.kept_rows):
        lp.add_function(f)
    lp.enable_by_count()
    drive(engine, reqs, concurrency=conc, id_prefix="m-")
    lp.disable_by_count()
    lp.print_stats(output_unit=1e-6, stripzeros=True)


if __name__ == "__main__":
    main()
