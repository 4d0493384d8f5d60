"""Session 43 (#12). Wall time of the pieces of our drafting call at fixed K = 15 (SplitTimer,
nested: a caller's time includes its callees'), in-process engine, demo pair, tasks prompts.

    python bench/results/s43/scratch/draft_parts.py CONCURRENCY
"""
import os, sys, time

def main():
    c = int(sys.argv[1])
    from _engine import engine_at
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    import dflash_vllm.models.drafter as M
    engine, runner, reqs, n = engine_at(15, c, "tasks")
    drive(engine, reqs[:n], concurrency=c, id_prefix="warm-")
    d = runner.drafter
    t = P.SplitTimer()
    t.wrap(runner, "propose_draft_token_ids", "runner.propose_draft_token_ids")
    for name in ("_plan_then_propose", "_plan", "propose", "_begin_draft", "_end_draft", "_flush_queue", "_write_context",
                 "_sample_draft_tokens", "build_per_group_and_layer_attn_metadata", "_drafting_rows"):
        t.wrap(d, name, "d." + name)
    m = d.model
    t.wrap(m, "write_context_kv", "model.write_context_kv"); t.wrap(m, "forward_block", "model.forward_block")
    for i, layer in enumerate(m.layers):
        a = layer.self_attn
        for mod, label in ((a.qkv_proj, "qkv_proj"), (a.o_proj, "o_proj"), (a.attn, "attn"), (a.rotary_emb, "rope"),
                           (layer.mlp.gate_up_proj, "gate_up"), (layer.mlp.down_proj, "down")):
            t.wrap(mod, "forward", f"L.{label}")
    for fn in ("rms_norm", "add_rms_norm", "mlp", "mask_rows"):
        orig = getattr(M, fn)
        holder = type("H", (), {})(); holder.f = orig
        t.wrap(holder, "f", f"fn.{fn}"); setattr(M, fn, holder.f)
    if hasattr(m, "compute_logits"):
        t.wrap(m, "compute_logits", "model.compute_logits")
    t0 = time.perf_counter()
    steps = len(drive(engine, reqs[n:], concurrency=c, id_prefix="s-")["steps"])
    ms = 1e3 * (time.perf_counter() - t0) / steps
    print(f"c={c}: {steps} steps {ms:.3f} ms/step")
    for k in sorted(t.seconds, key=lambda k: -t.seconds[k]):
        if t.calls[k]:
            print(f"  {k:44s} calls/step {t.calls[k]/steps:5.1f}  us/call {1e6*t.seconds[k]/t.calls[k]:8.1f}  us/step {1e6*t.seconds[k]/steps:8.1f}")

if __name__ == "__main__":
    main()
