"""Session 44 (issue #10): what a probe costs at a small batch on prompts the drafter does not
know, measured from the engine's own step times, against what the policy believes (its measured
probe_loss per log2 batch bucket and the spacing it derives). In-process adaptive engine; chat
prompts (SET), CONCURRENCY (default 1); a warm-up third, then two measured thirds.

    [SET=chat] python bench/results/s44/scratch/probe_cost.py [CONCURRENCY]
"""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "s43", "scratch"))
from _engine import engine_at  # noqa: E402


def main():
    c = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    import numpy as np
    from dflash_vllm.driver import drive
    engine, runner, reqs, n = engine_at("adaptive", c, "chat")
    for r in reqs:
        r["max_tokens"] = 160
    d = runner.drafter
    pol = d.policy
    drive(engine, reqs[:n], concurrency=c, id_prefix="warm-")
    planned = {}  # engine step index -> q
    step = [0]
    orig_plan = pol.plan

    reasons = {}

    def plan(*a, **k):
        acc = pol.acceptance
        why = ("surprised" if acc.surprised else "") + (
            " look" if pol._look_again is not None and acc.verified_steps > pol._look_again else "")
        o = pol.optimum
        due = o is not None and pol._probe_due(o, num_reqs=len(a[0]))
        kk, q = orig_plan(*a, **k)
        planned[step[0]] = (q, int(kk.sum()))
        if q:
            key = (why.strip() or ("due" if due else "other")) + f" after {pol._probe_spacing(o, len(a[0])) if o else -1}"
            r = why.strip() or ("due" if due else ("optimum drafts" if pol._optimum_cache.drafts else "other"))
            reasons[r] = reasons.get(r, 0) + 1
            if r == "optimum drafts" and os.environ.get("SHOW"):
                o2 = pol.optimum
                print(f"    step {step[0]}: g/g0 {o2.g / o2.g0:.3f} cap {o2.cap} thr {o2.thr:.3f} g(1..4) "
                      f"{pol.acceptance.survival(['<new>'])[0, :4].round(3).tolist()} rows {pol.acceptance.verified_steps}")
        return kk, q
    pol.plan = plan
    acc0 = pol.acceptance.verified_steps
    orig_step = engine.step

    def eng_step():
        out = orig_step()
        step[0] += 1
        return out
    engine.step = eng_step
    res = drive(engine, reqs[n:], concurrency=c, id_prefix="m-")
    secs = np.array([s["seconds"] for s in res["steps"]])
    toks = np.array([s["new_tokens"] for s in res["steps"]])
    probes = sorted(i for i, (q, _) in planned.items() if q > 0)
    near = set()
    for i in probes:
        near.update((i - 1, i, i + 1, i + 2))
    plain = np.array([i for i in range(len(secs)) if i not in near and toks[i] == c])
    base = float(np.median(secs[plain]))
    losses = []
    for i in probes:
        if i + 1 < len(secs):
            extra_tok = toks[i] + toks[i + 1] - 2 * c
            losses.append((secs[i] + secs[i + 1]) / base - 2.0 - extra_tok / c)
    print(f"SET={os.environ.get('SET', 'chat')} c={c}: {len(secs)} steps, plain step median {1e3 * base:.2f} ms, "
          f"{len(probes)} drafted steps (one per {len(secs) / max(len(probes), 1):.0f} steps), verifies {pol.acceptance.verified_steps - acc0}")
    print(f"  measured loss per drafted step, plain steps: mean {np.mean(losses):.2f} median {np.median(losses):.2f} "
          f"(step i and i+1 over the plain median, less tokens beyond one per request)")
    print(f"  share of wall: {(np.sum(losses) * base) / secs.sum():.3f}")
    print(f"  policy: probe_loss {dict((k, round(v, 2)) for k, v in pol.probe_loss.items())} "
          f"plain periods {dict((k, (round(1e3 * v[0], 2), v[1])) for k, v in pol._plain_period.items())}")
    print(f"  why the drafted steps came: {reasons}")
    o = pol.optimum
    if o is not None:
        print(f"  modelled probe loss {o.probe_loss:.2f} q_probe {o.q_probe} spacing {pol._probe_spacing(o, c)}")


if __name__ == "__main__":
    main()
