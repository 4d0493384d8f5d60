"""Session 47 (issue #10): why the dormant policy probes, cell by cell, through the full check's
rotation on one in-process engine (the bench's requests: max(16, 2c) per cell, 160 tokens at
most). Per cell: tok/s, steps, drafted steps, and the probes by reason: "surprise" (a verify the
curve made unlikely), "look" (a level probe's second look), "level" (the load fell 4x: after
LEVEL_PROBE_AFTER steps), "due" (the budgeted spacing), with the plain steps before each.

    python bench/results/s47/scratch/probe_why.py [REPEATS] [SETS] [CONCURRENCIES]
"""
import collections
import os
import sys
import time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    sets = (sys.argv[2] if len(sys.argv) > 2 else "tasks,code,chat,free").split(",")
    concs = [int(c) for c in (sys.argv[3] if len(sys.argv) > 3 else "1,2,4,8,16,32,64").split(",")]
    import numpy as np
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    envs.set(envs.FIXED_K, "adaptive")
    llm = P._engine(P._spec(), max(concs))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    eos = [tok.eos_token_id]
    prompts = {s: prompt_set(s, tok, max(16, 2 * max(concs)))[1] for s in sets}
    engine = llm.llm_engine
    drive(engine, [{"prompt_token_ids": p, "max_tokens": 16, "stop_token_ids": eos, "ignore_eos": False}
                   for p in prompts[sets[0]][:4]], concurrency=2, id_prefix="warm-")
    d = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.drafter
    pol = d.policy
    TRACE = os.environ.get("TRACE")
    log = []
    dumped = {}
    probes = []  # (reason, plain steps before it, batch)
    orig = pol._choose

    def choose(dec_ids, num_reqs, num_decode=None):
        acc = pol.acceptance
        surprised = acc.surprised
        look = pol._look_again is not None and acc.verified_steps > pol._look_again
        level = pol._level_moved(pol._level_bucket(num_reqs))
        before = pol.steps_since_draft
        k, q = orig(dec_ids, num_reqs, num_decode)
        c = pol._optimum_cache
        if q and c is not None and c.opt is not None and not c.drafts:
            why = "surprise" if surprised else "look" if look else "level" if level and before + 1 < pol.probe_every else "due"
            probes.append((why, before, num_reqs, q))
        if TRACE and num_reqs <= 2 and q and c.drafts and not dumped.get(pol._optimum_cache.step):
            dumped[pol._optimum_cache.step] = 1
            cm = pol.cost
            log.append("NEAR " + " ".join(f"b{b}:n{e[0]:.1f},{1e3 * e[1]:.1f}ms,age{cm._steps - e[2]}/{cm._steps - e[3]}" for b, e in sorted(cm._near.items()))
                       + f" plain.n {cm.plain.n} line1 {1e3 * cm._line(cm.plain.theta().tolist(), 1.0):.1f}")
        if TRACE and num_reqs <= 2:
            g = acc.rates()
            log.append(f"st{pol.step} v{acc.verified_steps} acc{acc.last_accepted} q{q} "
                       f"{'D' if c is not None and c.drafts else '-'} g{g[0]:.2f},{g[1]:.2f},{g[4]:.2f} "
                       f"G{(c.opt.g / c.opt.g0 if c is not None and c.opt is not None else 0):.2f}"
                       + (f" pf{pol.prefill_tokens:.1f} t0{1e3 * max(num_decode or 0, len(dec_ids)) / c.opt.g0:.1f} s{acc.survival(dec_ids[:1])[0, :4].round(2).tolist()} tv{1e3 * float(pol.cost.t_verify(num_reqs)):.1f}"
                          f"/{1e3 * float(pol.cost.t_verify(num_reqs, q * num_reqs)):.1f} td{1e3 * float(pol.cost.t_draft(num_reqs * (q + 1), num_reqs)):.1f}"
                          if q else ""))
        return k, q
    pol._choose = choose
    obs = []
    orig_obs = pol.cost.observe_step

    def observe_step(sec, num_tokens, drafts=0, transient=False):
        obs.append(f"{num_tokens}{'+' + str(drafts) if drafts else ''}{'T' if transient else ''}:{1e3 * sec:.1f}")
        return orig_obs(sec, num_tokens, drafts=drafts, transient=transient)
    pol.cost.observe_step = observe_step
    for rep in range(reps):
        for s in sets:
            for c in concs:
                n = max(16, 2 * c)
                reqs = [{"prompt_token_ids": prompts[s][i], "max_tokens": 160, "stop_token_ids": eos,
                         "ignore_eos": False} for i in range(n)]
                obs.clear()
                h0 = d.submitted_hist.copy()
                f0, p0 = d.num_drafter_forwards, len(probes)
                t = time.perf_counter()
                res = drive(engine, reqs, concurrency=c, id_prefix=f"{s}{c}r{rep}-")
                wall = time.perf_counter() - t
                h = d.submitted_hist - h0
                mk = float((h * np.arange(len(h))).sum() / max(h.sum(), 1))
                toks = sum(x["new_tokens"] for x in res["steps"])
                mine = probes[p0:]
                why = collections.Counter(p[0] for p in mine)
                gaps = [p[1] for p in mine]
                print(f"[{rep + 1}] {s:5} c={c:<3} {toks / wall:7.0f} tok/s steps {len(res['steps']):4d} meanK {mk:5.2f} "
                      f"drafted {d.num_drafter_forwards - f0:3d} probes {len(mine):2d} {dict(why)} "
                      f"gaps {gaps} q {[p[3] for p in mine]}", flush=True)
                if TRACE and s in TRACE.split(",") and c <= 2:
                    print("   OBS " + " ".join(obs[:60]), flush=True)
                    print("   " + " | ".join(x for x in log if " q0 - " not in x), flush=True)
                log.clear()
                obs.clear()


if __name__ == "__main__":
    main()
