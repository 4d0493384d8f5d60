"""Session 44 (issue #10): what a probe costs at a small batch on prompts the drafter does not
know, measured from the engine's own step times, against what the policy believes (its measured
probe_loss per log2 batch bucket and the spacing it derives). In-process adaptive engine; chat
prompts (SET), CONCURRENCY (default 1); a warm-up third, then two measured thirds.

    [SET=chat] python bench/results/s44/scratch/probe_cost.py [CONCURRENCY]
"""
import os
import sys
sys.path.insert(0, os.path.dirname(__file__))
from _trace import count_steps, trace_plans, warm_engine  # noqa: E402


def main():
    c = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    import numpy as np
    from dflash_vllm.driver import drive
    engine, runner, reqs, n = warm_engine("adaptive", c, "chat")
    pol = runner.drafter.policy
    planned, reasons = {}, {}  # engine step index -> (q, drafts); why -> drafted plans

    def on_plan(req_ids, k, q, why):
        planned[step[0]] = (q, int(k.sum()))
        if q:
            reasons[why] = reasons.get(why, 0) + 1
            if why == "optimum drafts" and os.environ.get("SHOW"):
                o = pol.optimum
                print(f"    step {step[0]}: g/g0 {o.g / o.g0:.3f} cap {o.cap} thr {o.thr:.3f} g(1..4) "
                      f"{pol.acceptance.survival(['<new>'])[0, :4].round(3).tolist()} rows {pol.acceptance.verified_steps}")
    trace_plans(pol, on_plan)
    acc0 = pol.acceptance.verified_steps
    step = count_steps(engine)
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
