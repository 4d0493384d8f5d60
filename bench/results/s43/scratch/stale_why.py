"""Session 43 (#10). Why the adaptive policy recomputes its optimum: per _choose call, which of
_choose's staleness conditions held (in-process engine, demo pair).

    [SET=code] python bench/results/s43/scratch/stale_why.py CONCURRENCY
"""
import os, sys, time, collections
import numpy as np

def main():
    c = int(sys.argv[1])
    from _engine import engine_at
    from dflash_vllm.driver import drive
    import dflash_vllm.adaptive as A
    engine, runner, reqs, n = engine_at("adaptive", c, "code")
    drive(engine, reqs[:n], concurrency=c, id_prefix="warm-")
    pol = runner.drafter.policy
    why = collections.Counter(); calls = collections.Counter(); secs = collections.Counter()
    orig_choose, orig_opt = pol._choose, pol._optimum
    state = {}
    def choose(dec_ids, num_reqs, num_decode=None):
        cc = pol._optimum_cache
        tags = []
        if cc is None or cc.opt is None:
            tags.append("none")
        else:
            if not A._near(cc.batch[0], num_reqs): tags.append(f"size {cc.batch[0]}->{num_reqs}")
            if not A._near(len(cc.batch[1]), len(dec_ids)): tags.append(f"dec {len(cc.batch[1])}->{len(dec_ids)}")
            if cc.drafts:
                if pol.step - cc.step >= pol.replan_every: tags.append("replan_every")
                if not cc.settled: tags.append("unsettled")
                if cc.batch != (num_reqs, dec_ids): tags.append("(members)")
            else:
                if cc.verified != pol.acceptance.verified_steps: tags.append("verified")
                if pol.step - cc.step >= pol.IDLE_REPLAN: tags.append("idle_replan")
        state["tags"] = tags; state["ran"] = False
        s = time.perf_counter(); r = orig_choose(dec_ids, num_reqs, num_decode); dt = time.perf_counter() - s
        key = ("RECOMPUTE " if state["ran"] else "reuse ") + ("drafts " if pol._optimum_cache and pol._optimum_cache.drafts else "nodrafts ") + "|".join(tags)
        why[key] += 1; secs[key] += dt
        return r
    def optimum(*a, **k):
        state["ran"] = True; state["args"] = (a, k)
        s = time.perf_counter(); r = orig_opt(*a, **k); secs["_optimum"] += time.perf_counter() - s; calls["_optimum"] += 1
        return r
    pol._choose, pol._optimum = choose, optimum
    # (the coefficient solves inside _optimum, and the acceptance curve: their share of its time)
    for cls, name in ((A._Ridge, "theta"), (A.AcceptanceModel, "survival"), (A.CostModel, "slope_verify"),
                      (A.CostModel, "t_verify")):
        f = getattr(cls, name)
        def w(*a, _f=f, _n=f"{cls.__name__}.{name}", **k):
            if _n.endswith("t_verify"):  # by kind: stale (on_step's clip) or solved, scalar or array
                _n = _n + ("(stale" if k.get("stale") else "(") + (",array)" if any(np.ndim(x) for x in a[1:3]) else ")")
            s = time.perf_counter(); r = _f(*a, **k); secs[_n] += time.perf_counter() - s; calls[_n] += 1
            return r
        setattr(cls, name, w)
    t0 = time.perf_counter()
    steps = len(drive(engine, reqs[n:], concurrency=c, id_prefix="s-")["steps"])
    print(f"c={c}: {steps} steps, {1e3*(time.perf_counter()-t0)/steps:.3f} ms/step; _optimum calls {calls['_optimum']} "
          f"{1e6*secs['_optimum']/max(calls['_optimum'],1):.0f} us each")
    for k in sorted(x for x in calls if "." in x):
        print(f"  {k:28s} {calls[k]:6d} calls {1e6*secs[k]/calls[k]:6.1f} us each, {1e6*secs[k]/steps:6.1f} us a step")
    for k, v in why.most_common(40):
        print(f"  {v:5d}  {1e6*secs[k]/v:6.0f} us  {k}")
    if os.environ.get("PROFILE"):  # the last _optimum call again, on a copy of the policy, under cProfile
        import copy, cProfile, pstats, pickle
        a, k = state["args"]
        del pol._optimum, pol._choose  # (instance attributes: the class's methods again)
        p2 = copy.deepcopy(pol)
        with open("/tmp/s43_policy.pkl", "wb") as f:
            pickle.dump((p2, a, k), f)
        s = time.perf_counter()
        for _ in range(200):
            p2._optimum(*a, **k)
        print(f"_optimum on the copy: {1e6*(time.perf_counter()-s)/200:.0f} us")
        cProfile.runctx("for _ in range(200): p2._optimum(*a, **k)", globals(), {"p2": p2, "a": a, "k": k}, "/tmp/s43_opt.prof")
        pstats.Stats("/tmp/s43_opt.prof").sort_stats("tottime").print_stats(25)

if __name__ == "__main__":
    main()
