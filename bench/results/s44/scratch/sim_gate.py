"""Session 44 (issue #10), not kept: a dormant policy's flip to drafting that no new evidence
brought (no verify, no shift, no surprise since the "no drafts" optimum, batch within a quarter:
the drift of the evidence toward the prior) waits until a probe is due. Simulation (ENGINE_COST):
chat after tasks, tasks after chat, tasks at batch 1 after the weak cells; then
``gate_seeds``: a fresh engine's chat at batch 64, then tasks at batch 1, 16 seeds. Needs the
experiment's patch, as it was: ``AdaptivePolicy.GATE_FLIPS`` (class attribute) and, in
``_choose`` right after ``drafts`` is decided, ``if drafts and self.GATE_FLIPS and c is not None
and c.opt is not None and not c.drafts and c.verified == verified and c.shifts ==
self.acceptance.shifts and not surprised and _near(c.batch[0], num_reqs) and not
self._probe_due(c.opt, num_reqs=num_reqs): drafts = False``.

    python bench/results/s44/scratch/sim_gate.py [gate_seeds]

``GATES=0,1,2`` (session 45, ``bench/results/s45/sim_gate2.txt``): a third variant, 2, gates only
where a drafter forward near the probe's block was timed (the patch's condition gains ``and
(self.GATE_FLIPS == 1 or self.cost.draft_known_near(opt.probe_block, num_reqs))``).
"""
import sys, numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from tests.unit.test_adaptive import _simulate_hist, DEMO_HIST, DEMO_COST, ENGINE_COST, _tasks_at_batch_1_after, _weak_cells, _hidden
from dflash_vllm.adaptive import AdaptivePolicy
GATES = [int(x) for x in __import__("os").environ.get("GATES", "0,1").split(",")]
if sys.argv[1:] == ['gate_seeds']:
    for gate in GATES:
        AdaptivePolicy.GATE_FLIPS = gate
        a = [_tasks_at_batch_1_after((("chat", 64, 60, 4, s),), s, steps=200, life=20, hidden=True, cost=ENGINE_COST) for s in range(16)]
        print(f"gate {gate}: fresh chat 64 -> tasks 1: mean {np.mean(a):.3f} min {min(a):.2f}", flush=True)
    sys.exit(0)
for gate in GATES:
    AdaptivePolicy.GATE_FLIPS = gate
    out = []
    for r in (1, 4, 8):
        cost = ENGINE_COST[r if r != 4 else 8]
        turn, back, nd = [], [], []
        for seed in range(6):
            h = _hidden(r, ENGINE_COST) if r != 4 else dict(_hidden(8, ENGINE_COST))
            p = AdaptivePolicy(15)
            _simulate_hist(p, DEMO_HIST["tasks"], r, *cost, steps=300, seed=seed, life=4, **h)
            cnt = [0]
            orig = p.plan
            def plan(*a, _o=orig, _c=cnt, **k):
                kk, q = _o(*a, **k)
                _c[0] += q > 0
                return kk, q
            p.plan = plan
            n = 900 if r == 1 else 300
            ours = _simulate_hist(p, DEMO_HIST["chat"], r, *cost, steps=n, seed=seed + 1, warm=0, life=20, **h)
            k0 = _simulate_hist(AdaptivePolicy(15, fixed=[0]), DEMO_HIST["chat"], r, *cost, steps=n, seed=seed + 1, warm=0, life=20, **h)
            turn.append(ours / k0); nd.append(cnt[0])
            p = AdaptivePolicy(15)
            _simulate_hist(p, DEMO_HIST["chat"], r, *cost, steps=1500, seed=seed, life=20, **h)
            n = 260 if r == 1 else 60
            ours = _simulate_hist(p, DEMO_HIST["tasks"], r, *cost, steps=n, seed=seed + 1, warm=0, life=4, **h)
            fx = max(_simulate_hist(AdaptivePolicy(15, fixed=[k]), DEMO_HIST["tasks"], r, *cost, steps=n, seed=seed + 1, warm=0, life=4, **h) for k in (0, 3, 7, 15))
            back.append(ours / fx)
        out.append(f"r={r}: chat after tasks / K=0 {np.mean(turn):.3f} (drafted {np.mean(nd):.0f}), tasks after chat / best K {np.mean(back):.3f}")
    wc = np.mean([_tasks_at_batch_1_after(_weak_cells(s), s, steps=250, life=14, hidden=True, cost=ENGINE_COST) for s in range(12)])
    print(f"gate {gate}: " + " | ".join(out) + f" | tasks1 after weak cells {wc:.3f}", flush=True)
