"""Session 49 (issue #10): why a fresh engine drafts nothing at tasks c = 32-64 in the full check's
first repeat. One in-process adaptive engine runs the first repeat's tasks cells (c = 1..64, the
bench's requests); at batch >= MIN_BATCH the policy's optimum is logged on its first plans of each
cell: goodput with drafts over without (G/G0), the best cap and threshold, the prices (plain step
t0, what the drafts add, the drafter call), the acceptance rates and the cost fits.

    python bench/results/s49/scratch/cold_batch.py [CONCURRENCIES] [MIN_BATCH] [SETS]

REPEATS=N passes (default 2); S49_NEAREST=1 tries a plain-step price at a batch bucket without plain
steps from the nearest bucket's error (the line's own error there, CostModel._local);
S49_PREBUILD=M builds every padded width up to M rows in every padded layer once, at load;
S49_RISE=1 brings a probe once the batch level is 2x above every level drafted at (AdaptivePolicy._level_moved).
"""
import os
import sys
import time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    concs = [int(c) for c in (sys.argv[1] if len(sys.argv) > 1 else "1,2,4,8,16,32,64").split(",")]
    min_batch = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    sets = (sys.argv[3] if len(sys.argv) > 3 else "tasks").split(",")
    import numpy as np
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    envs.set(envs.FIXED_K, "adaptive")
    if os.environ.get("S49_NEAREST"):  # lead 3, tried: a bucket without plain steps takes the nearest one's error
        from dflash_vllm.adaptive import CostModel
        own = CostModel._local

        def _local(self, n, plain):
            b = self._bucket(n)
            for x in (b, b - 1, b + 1, b - 2, b + 2):
                e = self._near.get(x)
                if e is not None and self._steps - e[2] <= self.LOCAL_WITHIN and self.plain.n >= self.PLAIN_MIN:
                    return e[1] - max(self._line(plain, e[0]), 0.0)
            return 0.0
        CostModel._local = _local if os.environ["S49_NEAREST"] == "1" else own
    llm = P._engine(P._spec(), max(concs))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    eos = [tok.eos_token_id]
    prompts = {s: prompt_set(s, tok, max(16, 2 * max(concs)))[1] for s in sets}
    engine = llm.llm_engine
    drive(engine, [{"prompt_token_ids": p, "max_tokens": 16, "stop_token_ids": eos, "ignore_eos": False}
                   for p in prompts[sets[0]][:4]], concurrency=2, id_prefix="warm-")
    d = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.drafter
    if os.environ.get("S49_PREBUILD"):  # lead 1, tried: every padded width's primitive built at load
        import torch
        from dflash_vllm.fixes import cpu_gemm_widths as W
        runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
        widths = sorted({W.bucket(m) for m in range(1, int(os.environ["S49_PREBUILD"]) + 1)}, reverse=True)
        t, n = time.perf_counter(), 0
        for model in (runner.model, d.model):
            for mod in model.modules():
                fn = getattr(mod, "cpu_linear", None)
                if fn is None or not hasattr(fn, W.MARK):
                    continue
                k = getattr(mod, "input_size_per_partition", None) or (
                    mod.weight.shape[1] if getattr(mod, "weight", None) is not None and mod.weight.dim() == 2 else None)
                if not k:
                    print("skipped", type(mod).__name__, flush=True)
                    continue
                for w in widths:
                    fn(torch.zeros(w, k), mod.weight, getattr(mod, "bias", None))
                    n += 1
        print(f"prebuilt {n} (layer, width) pairs, {len(widths)} widths, in {time.perf_counter() - t:.2f} s", flush=True)
    pol, cm = d.policy, d.policy.cost
    if os.environ.get("S49_RISE"):  # the next lever, tried: a probe once the level is 2x above any level drafted at
        top = [None]
        own_moved, own_choose = pol._level_moved, pol._choose

        def level_moved(b):
            return own_moved(b) or (top[0] is not None and b >= top[0] + 1)

        def choose(dec_ids, num_reqs, num_decode=None):
            k, q = own_choose(dec_ids, num_reqs, num_decode)
            if q:
                b = pol._level_bucket(num_reqs)
                top[0] = b if top[0] is None else max(top[0], b)
            return k, q
        pol._level_moved, pol._choose = level_moved, choose
    orig = pol._optimum
    logged = [0]

    def optimum(dec_ids, num_reqs, num_decode=None):
        opt = orig(dec_ids, num_reqs, num_decode)
        if opt is not None and num_reqs >= min_batch and logged[0] < 6:
            logged[0] += 1
            n0 = num_reqs + pol.prefill_tokens
            t0 = float(cm.t_verify(n0))
            dk = int(opt.k.sum()) if opt.k is not None else 0
            q = int(opt.k.max()) if opt.k is not None and len(opt.k) else 0
            nd = int(np.count_nonzero(opt.k)) if opt.k is not None else 0
            inc = cm.increment_at(n0)(dk)
            td = cm.draft_at(num_reqs)(nd * (q + 1)) if q else 0.0
            th = cm.verify.theta()
            print(f"   st{pol.step} b{num_reqs} pf{pol.prefill_tokens:.0f} G/G0 {opt.g / opt.g0:.3f} cap {opt.cap} thr {opt.thr:.3f} "
                  f"D {dk} q {q} | t0 {1e3 * t0:.2f} inc {1e3 * inc:.2f} td {1e3 * td:.2f} ms | delta {1e3 * cm.delta():.2f} "
                  f"slope/draft {1e6 * cm.slope_verify(n0 + dk):.1f} us | draft fit {np.round(cm.draft.theta(), 5).tolist()} r0 {cm._draft_r0} "
                  f"known {cm.draft_known_near(max(nd, 1) * (q + 1), num_reqs)} | g {np.round(pol.acceptance.rates()[:8], 2).tolist()} "
                  f"| verify fit {np.round(th, 5).tolist()} n {cm.verify.n} plain.n {cm.plain.n}", flush=True)
        return opt
    pol._optimum = optimum
    obs, dobs = [], []
    o_step, o_draft = cm.observe_step, cm.observe_draft

    def observe_step(sec, num_tokens, drafts=0, transient=False):
        obs.append(f"{num_tokens}{'+' + str(drafts) if drafts else ''}{'T' if transient else ''}:{1e3 * sec:.1f}")
        return o_step(sec, num_tokens, drafts=drafts, transient=transient)

    def observe_draft(sec, block_tokens, num_reqs):
        dobs.append(f"{block_tokens}/{num_reqs}:{1e3 * sec:.1f}")
        return o_draft(sec, block_tokens, num_reqs)
    cm.observe_step, cm.observe_draft = observe_step, observe_draft
    for rep in range(int(os.environ.get("REPEATS", "2"))):
        for s in sets:
            for c in concs:
                obs.clear(); dobs.clear()
                n = max(16, 2 * c)
                reqs = [{"prompt_token_ids": prompts[s][i], "max_tokens": 160, "stop_token_ids": eos,
                         "ignore_eos": False} for i in range(n)]
                h0 = d.submitted_hist.copy()
                logged[0] = 0
                t = time.perf_counter()
                res = drive(engine, reqs, concurrency=c, id_prefix=f"{s}{c}r{rep}-")
                wall = time.perf_counter() - t
                h = d.submitted_hist - h0
                mk = float((h * np.arange(len(h))).sum() / max(h.sum(), 1))
                toks = sum(x["new_tokens"] for x in res["steps"])
                print(f"[{rep + 1}] {s:5} c={c:<3} {toks / wall:7.0f} tok/s steps {len(res['steps']):4d} meanK {mk:5.2f}", flush=True)
                if c >= min_batch:
                    print("   STEPS " + " ".join(obs[:40]), flush=True)
                    print("   DRAFTS " + " ".join(dobs[:25]), flush=True)


if __name__ == "__main__":
    main()
