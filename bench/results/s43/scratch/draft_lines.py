"""Session 43 (#12). line_profiler over the host code of our drafting call at fixed K = 15, in an
in-process engine (demo pair, tasks prompts): propose, the metadata build, kernel_args, the
context write, the attention layer, the backend's forward, rms_norm, the draft sampling.
(line_profiler is not a project dependency: `pip install line_profiler` into the venv first.)

    python bench/results/s43/scratch/draft_lines.py CONCURRENCY
"""
import os, sys

def main():
    c = int(sys.argv[1])
    from line_profiler import LineProfiler
    from _engine import engine_at
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    import dflash_vllm.models.drafter as M
    import dflash_vllm.attention.backend as B
    import dflash_vllm.proposers.dflash as D
    engine, runner, reqs, n = engine_at(15, c, "tasks")
    drive(engine, reqs[:n], concurrency=c, id_prefix="warm-")
    lp = LineProfiler()
    targets = [(D.DFlashProposer, "propose"), (D.DFlashProposer, "_sample_draft_tokens"), (D.DFlashProposer, "_begin_draft"),
               (B.DFlashAttentionMetadataBuilder, "build_for_drafting"), (M.DFlashDrafterModel, "write_context_kv"),
               (M.DFlashDrafterModel, "forward_block"), (M.DrafterAttention, "forward"), (M.DrafterLayer, "forward")]
    for cls, name in targets:
        f = getattr(cls, name)
        lp.add_function(getattr(f, "__wrapped__", f))  # (under torch.inference_mode's decorator: the function inside)
        setattr(cls, name, lp(f))
    for mod, name in ((B, "kernel_args"), (B, "dflash_attention_cpu_kernel"), (M, "rms_norm"), (M, "mlp"), (B, "write_kv")):
        setattr(mod, name, lp(getattr(mod, name)))
    impl = [x for x in vars(B).values() if isinstance(x, type) and x.__name__ == "DFlashAttentionImpl"][0]
    impl.forward = lp(impl.forward)
    drive(engine, reqs[n:], concurrency=c, id_prefix="s-")
    lp.print_stats(output_unit=1e-6, stripzeros=True)

if __name__ == "__main__":
    main()
