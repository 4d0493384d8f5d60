"""Session 45 scratch (issue #10): line profile of the proposer's ``_plan`` and the policy's
``plan`` / ``_choose`` on tasks prompts at concurrency C (adaptive, or K pinned), in-process.

    python bench/results/s45/scratch/plan_lines.py [adaptive|K] [C] [REQUESTS]
"""
import os
import sys
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    a = sys.argv[1:] + [None] * 3
    mode, conc, n = a[0] or "adaptive", int(a[1] or 1), int(a[2] or 48)
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
    ids = prompt_set(os.environ.get("SET", "tasks"), tok, n)[1]
    reqs = [{"prompt_token_ids": ids[i % len(ids)], "max_tokens": 160, "stop_token_ids": [tok.eos_token_id],
             "ignore_eos": False} for i in range(n)]
    engine = llm.llm_engine
    drive(engine, reqs[:16], concurrency=conc, id_prefix="w-")
    lp = LineProfiler()
    for f in (dflash.DFlashProposer._plan, dflash.DFlashProposer._plan_then_propose, adaptive.AdaptivePolicy.plan,
              adaptive.AdaptivePolicy._choose, adaptive.AdaptivePolicy.on_step, adaptive.AdaptivePolicy._optimum, adaptive.AcceptanceModel.survival, adaptive.AcceptanceModel.rates, adaptive.CostModel.t_verify, adaptive.CostModel.t_draft, adaptive.CostModel.t_verify_drafted, adaptive.CostModel.slope_verify, adaptive.CostModel.draft_terms, adaptive.CostModel.observe_step, adaptive.AdaptivePolicy._fill_width,
              metrics.observe_draft_lengths, dflash.DFlashProposer._submit, dflash.DFlashProposer._observe_verified):
        lp.add_function(f)
    lp.enable_by_count()
    drive(engine, reqs, concurrency=conc, id_prefix="m-")
    lp.disable_by_count()
    lp.print_stats(output_unit=1e-6, stripzeros=True)


if __name__ == "__main__":
    main()
