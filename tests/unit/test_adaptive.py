"""The adaptive drafting policy on its own (no engine): the acceptance model, the cost model, the
goodput choice, and a closed-loop simulation against every fixed K under known step costs."""

import os
import time
import types
import zlib

import numpy as np
import pytest

from dflash_vllm import adaptive, envs
from dflash_vllm.adaptive import AcceptanceModel, AdaptivePolicy, CostModel

pytestmark = pytest.mark.unit


def test_acceptance_model_learns_curve_and_shrinks_requests():
    m = AcceptanceModel(8)
    rng = np.random.default_rng(0)
    for _ in range(300):  # server-wide: geometric acceptance, rate 0.6, 8 drafts each
        a = np.minimum(rng.geometric(0.4, size=16) - 1, 8)
        m.observe([f"r{i}" for i in range(16)], np.full(16, 8), a)
    assert m.rates()[:3] == pytest.approx([0.6] * 3, abs=0.06)
    # One request that always accepts everything: pulled up, but shrunk toward the server.
    for _ in range(3):
        m.observe(["good"], [8], [8])
    s = m.survival(["good", "new"])
    assert s[0, 3] > s[1, 3] * 1.5 and s[1, 0] == pytest.approx(m.rates()[0], rel=1e-6)
    assert np.all(np.diff(s, axis=1) <= 0) and s.max() < 1
    m.forget(["good"])
    assert "good" not in m.requests


def test_cost_model_fits_piecewise_linear_steps():
    cm = CostModel()
    rng = np.random.default_rng(1)
    true = lambda n: 0.004 + 2e-6 * n + 2e-5 * max(n - 256, 0)  # noqa: E731  flat, then compute-bound
    for _ in range(400):
        n = int(np.exp(rng.uniform(0, np.log(2000))))  # batches of every size, as a server sees
        cm.observe_step(true(n) * (1 + 0.02 * rng.standard_normal()), n)
        d, r = int(rng.integers(16, 1024)), int(rng.integers(1, 65))
        cm.observe_draft(0.001 + 4e-6 * d + 3e-5 * r, d, r)
    for n in (10, 200, 600, 1500):
        assert float(cm.t_verify(n)) == pytest.approx(true(n), rel=0.15)
    assert cm.slope_verify(100) < cm.slope_verify(600)
    assert float(cm.t_draft(512, 8)) == pytest.approx(0.001 + 4e-6 * 512 + 3e-5 * 8, rel=0.05)
    assert float(cm.t_draft(16, 1)) == pytest.approx(0.001 + 4e-6 * 16 + 3e-5, rel=0.1)
    assert float(cm.t_draft(64, 64)) == pytest.approx(0.001 + 4e-6 * 64 + 3e-5 * 64, rel=0.05)


def test_the_optimum_prices_its_plans_as_the_cost_model_does():
    """_optimum prices the ~11 plans of each round in Python floats (CostModel.increment_at and
    t_draft's line at the batch; session 47: half its host time) instead of numpy arrays. A plan's
    price must still be the cost model's, to the last digit: the increment against t_verify over
    draft counts on both sides of every hinge, and the goodput the optimum reports against the
    one recomputed from t_verify and t_draft for the plan it returns."""
    cm = CostModel()
    rng = np.random.default_rng(3)
    true = lambda n, d: 0.004 + 3e-5 * n + 2e-5 * d + 4e-5 * max(n + d - 256, 0) + 0.002 * (d > 0)  # noqa: E731
    for _ in range(600):
        n = int(np.exp(rng.uniform(0, np.log(400))))
        d = int(rng.integers(0, 16 * n + 1)) if rng.random() < 0.7 else 0
        cm.observe_step(true(n, d) * (1 + 0.02 * rng.standard_normal()), n + d, drafts=d)
    th = cm.verify.theta()
    assert any(th[2:2 + len(cm.KNOTS)] != 0) and cm.delta() > 0  # hinges and delta in play
    for n0 in (1.0, 7.5, 60.0, 250.0, 900.0):
        inc, t_plain = cm.increment_at(n0), float(cm.t_verify(n0))
        for d in (0, 1, 3, 15, 100, 300, 1000, 2000):
            assert t_plain + inc(d) == float(cm.t_verify(n0, d)), (n0, d)

    p = AdaptivePolicy(15)
    _simulate(p, np.full(8, 0.8), lambda n, r: 0.006 + 1e-4 * n + 0.001 * (n > r), lambda d: 0.003 + 5e-5 * d, steps=300)
    ids = [f"r{i}" for i in range(8)]
    p.prefill_tokens = 3.0
    for num_decode in (8, 12):
        opt = p._optimum(ids, 8, num_decode)
        s = p.acceptance.survival(ids)
        k = opt.k
        e = num_decode + sum(float(s[i, :k[i]].sum()) for i in range(8))
        t = float(p.cost.t_verify(8 + p.prefill_tokens, int(k.sum()))) + float(
            p.cost.t_draft(int(np.count_nonzero(k)) * (opt.cap + 1), 8))
        assert k.any() and opt.g == pytest.approx(e / t, rel=1e-12), (opt.g, e / t)


def _simulate(policy: AdaptivePolicy, alphas: np.ndarray, t_verify, t_draft, steps: int = 600, seed: int = 0) -> float:
    """Closed loop at a constant batch, geometric acceptance per request: tokens per second."""
    def accepted(rng, k_prev):
        return np.minimum(rng.geometric(1 - alphas) - 1, k_prev)

    return _closed_loop(policy, len(alphas), accepted, t_verify, t_draft, steps, warm=50, seed=seed)


def _closed_loop(policy, r, accepted, t_verify, t_draft, steps, warm, seed=0, life=0, hidden_draft=0.0,
                 transient=0.0, sentinels=0) -> float:
    """The runner's order: verify (over the anchors and the drafts planned last step), then the
    drafting call (period observed, plan), the drafter forward, then acceptance of the verified
    drafts is observed. `accepted(rng, k_prev)` draws the accepted drafts per request. With
    `life`, each row is a new request every `life` steps (short requests: no per-request history).
    Costs no clock of the policy attributes: `hidden_draft` seconds more in every drafting call
    than the drafter forward it reports (the deferred context write), `transient` seconds more
    in the first plain step after a drafted one (vLLM leaving its speculative path). With
    ``sentinels`` (and ``life``), requests that arrive while the policy closes the door (its
    optimum is "no drafts" by a margin, ``closes_door``) are closed at the door but the first
    ``sentinels`` (the proposer's ``_close_door``): they
    never draft, and a probe's block covers the others only."""
    rng = np.random.default_rng(seed)
    ids = [f"q{i}" for i in range(r)]
    gen = 0
    decode = draftable = np.ones(r, dtype=bool)
    k_prev = np.zeros(r, dtype=np.int64)
    t, emitted, d_prev, t0 = 0.0, 0, None, 0.0
    drafted_before = False
    for step in range(steps):
        n = r + int(k_prev.sum())
        step_start = t
        t += t_verify(n, r)
        if n == r and drafted_before:
            t += transient
        drafted_before = n > r
        a = accepted(rng, k_prev)
        if step > warm:
            emitted += int(r + a.sum())
        policy.on_step(t, n, r, step_start)
        drafted = k_prev > 0
        policy.acceptance.observe([ids[i] for i in np.flatnonzero(drafted)], k_prev[drafted], a[drafted])
        if life and step % life == 0:
            policy.acceptance.forget(ids)
            gen += 1
            ids = [f"q{i}.{gen}.{seed}" for i in range(r)]
            if sentinels:
                draftable = decode & (np.arange(r) < sentinels) if policy.closes_door(r) else decode
        k, q = policy.plan(ids, draftable, num_decode=r)
        d_prev = None
        if q:  # the drafter forward runs for the requests that draft (the proposer's _drafting_rows)
            b = int(np.count_nonzero(k)) * (q + 1)
            d_prev = t_draft(b)
            policy.on_draft_time(d_prev, b, r)
            t += d_prev + hidden_draft
        k_prev = k
        if step == warm:
            t0 = t
    return emitted / (t - t0)


def _dormant_policy(r: int, p_accept: float, steps: int, ok) -> AdaptivePolicy:
    """A policy after a closed loop at batch r (drafted runs geometric(p_accept) - 1 long;
    verify 4 ms + 0.1 ms a token, drafter 3 ms + 0.05 ms a block token) of ``steps`` steps, or
    10, 20, ... 70 more (the same trajectory, further on): the first whose state passes ``ok``.
    Where the set-up ends relative to the probes (one on its last step, one due within the
    steps a test then looks at) depends on every rule of the policy; a test about one rule
    needs the state it describes, not one loop length's luck (session 46: three tests here
    failed under each of three unrelated changes of the cost model for that reason alone)."""
    for extra in range(0, 80, 10):
        p = AdaptivePolicy(15)
        rng = np.random.default_rng(0)
        _closed_loop(p, r, lambda g, k: np.minimum(rng.geometric(p_accept, r) - 1, k), lambda n, _r: 0.004 + 1e-4 * n,
                     lambda d: 0.003 + 5e-5 * d, steps=steps + extra, warm=0)
        if ok(p):
            return p
    raise AssertionError(f"no set-up of {steps}-{steps + 70} steps at batch {r} gives the state")


REGIMES = {
    # name: (acceptance per request, T_v(N, R), T_d(D)) in seconds
    "batch1_good_drafter": (np.array([0.85]), lambda n, r: 0.010 + 1e-5 * n, lambda d: 0.002 + 2e-5 * d),
    "batch64_compute_bound": (np.full(64, 0.85), lambda n, r: 0.002 + 1e-4 * n, lambda d: 0.001 + 4e-5 * d),
    "batch8_poor_drafter": (np.full(8, 0.25), lambda n, r: 0.005 + 5e-5 * n, lambda d: 0.002 + 3e-5 * d),
    "batch16_mixed": (np.array([0.9] * 8 + [0.2] * 8), lambda n, r: 0.004 + 1e-4 * max(n - 64, 0),
                      lambda d: 0.001 + 1e-5 * d),
    # A step that verifies any draft pays a fixed cost (vLLM's speculative bookkeeping: ~3 ms
    # over a 6.5 ms plain step for the demo pair on CPU): drafting pays only for a good drafter.
    "batch1_spec_overhead_poor": (np.array([0.3]), lambda n, r: 0.0065 + 0.003 * (n > r) + 2e-5 * n,
                                  lambda d: 0.003 + 1e-5 * d),
    "batch1_spec_overhead_good": (np.array([0.8]), lambda n, r: 0.0065 + 0.003 * (n > r) + 2e-5 * n,
                                  lambda d: 0.003 + 1e-5 * d),
}


@pytest.mark.parametrize("regime", list(REGIMES))
def test_adaptive_matches_best_fixed_k_and_never_loses_to_no_speculation(regime):
    alphas, tv, td = REGIMES[regime]
    k_max = 15
    fixed = {k: _simulate(AdaptivePolicy(k_max, fixed=[k]), alphas, tv, td) for k in (0, 1, 3, 7, 15)}
    ours = _simulate(AdaptivePolicy(k_max), alphas, tv, td)
    best = max(fixed, key=fixed.get)
    print(f"{regime}: adaptive {ours:.1f} tok/s; fixed " + ", ".join(f"K={k} {v:.1f}" for k, v in fixed.items()))
    assert ours >= 0.97 * fixed[0], f"{regime}: adaptive {ours:.1f} < 0.97 x no drafts {fixed[0]:.1f}"
    assert ours >= 0.95 * fixed[best], f"{regime}: adaptive {ours:.1f} < 0.95 x best fixed K={best} {fixed[best]:.1f}"


def test_choice_flips_with_load_at_equal_acceptance():
    """Same acceptance curve: batch 1 drafts deep, batch 64 on a compute-bound step drafts little or nothing."""
    got = {}
    for r, tv in ((1, lambda n, r: 0.010 + 1e-5 * n), (64, lambda n, r: 0.002 + 2e-4 * n)):
        p = AdaptivePolicy(15)
        _simulate(p, np.full(r, 0.8), tv, lambda d: 0.001 + 4e-5 * d, steps=300)
        k, q = p.plan([f"q{i}" for i in range(r)], np.ones(r, dtype=bool))
        got[r] = float(k.mean())
    assert got[1] >= 6 and got[64] <= 2, got


def test_fixed_k_pins_every_decoding_request():
    p = AdaptivePolicy(7, fixed=[3])
    p.on_step(0.0, 10, 4, None)
    k, q = p.plan(["a", "b", "c", "d"], np.array([True, False, True, True]))
    assert k.tolist() == [3, 0, 3, 3] and q == 3
    p0 = AdaptivePolicy(7, fixed=[0])
    p0.on_step(0.0, 10, 4, None)
    k, q = p0.plan(["a", "b"], np.array([True, True]))
    assert k.tolist() == [0, 0] and q == 0


def test_config_key_is_taken_out_for_vllm(monkeypatch):
    from dflash_vllm.config import DFlashConfigError

    class Args:
        speculative_config = {"method": "dflash", "model": "x", "num_speculative_tokens": 7, "dflash_fixed_k": 3}

    monkeypatch.setenv(envs.FIXED_K.name, "")  # recorded, so the test leaves the environment as it found it
    args = Args()
    adaptive.pop_config_key(args)
    assert "dflash_fixed_k" not in args.speculative_config and os.environ[envs.FIXED_K.name] == "3"
    assert adaptive.fixed_k_from_env(7) == [3]
    args.speculative_config = {"num_speculative_tokens": 7, "dflash_fixed_k": None}
    adaptive.pop_config_key(args)
    assert os.environ[envs.FIXED_K.name] == "none" and adaptive.fixed_k_from_env(7) == [7]  # K every step
    args.speculative_config = {"num_speculative_tokens": 7, "dflash_adaptive": True}
    adaptive.pop_config_key(args)
    assert "dflash_adaptive" not in args.speculative_config and adaptive.fixed_k_from_env(7) is None
    for bad in (8, -1, "3", True):
        args.speculative_config = {"num_speculative_tokens": 7, "dflash_fixed_k": bad}
        with pytest.raises(DFlashConfigError, match="dflash_fixed_k"):
            adaptive.pop_config_key(args)
    monkeypatch.setenv(envs.FIXED_K.name, "0,0,9")
    assert adaptive.fixed_k_from_env(7) == [0, 0, 7]


def test_adaptive_drafting_is_the_default_on_one_cpu_rank_and_a_config_does_not_carry_over(monkeypatch):
    """Neither key: the policy on for our DFlash on one CPU rank (where the full check measured
    it), K every step under tensor parallelism, with async scheduling asked for, for vLLM's own
    DFlash and for other methods. What one engine's config set does not decide the next
    engine's in the same process; a value the user exported does."""
    monkeypatch.setenv(envs.FIXED_K.name, "")
    monkeypatch.setattr(adaptive, "_from_config", None)

    class Args:
        tensor_parallel_size, pipeline_parallel_size, async_scheduling = 1, 1, None

    def chosen(spec=None, **attrs):
        args = Args()
        args.__dict__.update(attrs)
        args.speculative_config = {"method": "dflash", "model": "x", "num_speculative_tokens": 7, **(spec or {})}
        adaptive.pop_config_key(args)
        assert not {"dflash_adaptive", "dflash_fixed_k"} & set(args.speculative_config)
        return envs.value(envs.FIXED_K), args

    value, args = chosen()
    assert value == "adaptive" and adaptive.fixed_k_from_env(7) is None
    assert args.async_scheduling is False  # the policy needs synchronous scheduling
    assert chosen({"dflash_adaptive": False})[0] == "none"  # K every step, and not carried over:
    assert chosen()[0] == "adaptive"
    assert chosen({"dflash_fixed_k": 3})[0] == "3"
    assert chosen(tensor_parallel_size=2)[0] == ""
    assert chosen(pipeline_parallel_size=2)[0] == ""
    value, args = chosen(async_scheduling=True)
    assert value == "" and args.async_scheduling is True
    assert chosen({"dflash_adaptive": True}, tensor_parallel_size=2)[0] == "adaptive"  # asked for: on
    assert chosen({"method": "eagle3"})[0] == ""
    monkeypatch.setenv(envs.NATIVE.name, "1")
    assert chosen()[0] == ""
    monkeypatch.setenv(envs.NATIVE.name, "0")
    monkeypatch.setenv(envs.FIXED_K.name, "5")  # the user's own
    assert chosen()[0] == "5"
    from vllm.platforms import current_platform

    monkeypatch.setattr(type(current_platform), "is_cpu", lambda self: False)
    monkeypatch.setenv(envs.FIXED_K.name, "")
    assert chosen()[0] == ""  # CUDA: K every step until measured there


def test_follows_a_jump_in_load():
    """One device (flat until 64 verified tokens, then compute-bound): learned at batch 1 (deep
    drafts pay), then batch 64 arrives (they do not): the policy must let go of the old belief."""
    tv = lambda n, r: 0.004 + 1e-4 * max(n - 64, 0)  # noqa: E731
    td = lambda d: 0.001 + 4e-5 * d  # noqa: E731
    p = AdaptivePolicy(15)
    before = _simulate(p, np.array([0.85]), tv, td, steps=300)
    ours = _simulate(p, np.full(64, 0.85), tv, td)
    none = _simulate(AdaptivePolicy(15, fixed=[0]), np.full(64, 0.85), tv, td)
    before_none = _simulate(AdaptivePolicy(15, fixed=[0]), np.array([0.85]), tv, td, steps=300)
    print(f"batch 1: adaptive {before:.1f} tok/s vs no drafts {before_none:.1f}; "
          f"after the jump to 64: adaptive {ours:.1f} vs {none:.1f}")
    assert before > 2 * before_none and ours >= 0.95 * none


def test_seeded_requests_draft_k_from_a_full_block():
    """A seed reproduces its output only under the same drafts: seeded rows keep K and the block."""
    p = AdaptivePolicy(7)
    _simulate(p, np.full(4, 0.1), lambda n, r: 0.002 + 1e-3 * n, lambda d: 0.01 + 1e-3 * d, steps=100)
    ids, dec = ["a", "b", "c", "d"], np.ones(4, dtype=bool)
    k, q = p.plan(ids, dec)
    assert q == 0 and not k.any()  # drafting does not pay here
    k, q = p.plan(ids, dec, seeded=np.array([False, True, False, False]))
    assert k.tolist() == [0, 7, 0, 0] and q == 7


def test_submitted_length_histogram_on_metrics(tmp_path):
    pytest.importorskip("prometheus_client")
    from dflash_vllm import metrics

    table = metrics.StepTimeTable.create()
    assert table.read_lengths() == []
    table.observe_lengths(np.array([3, 0, 2, 0]))
    table.observe_lengths(np.array([1, 0, 0, 4]))
    assert table.read_lengths() == [4.0, 0.0, 2.0, 4.0]
    fams = {f.name: f for f in metrics._Collector(table).collect() if f.name.startswith("dflash:submitted")}
    (fam,) = fams.values()
    samples = {(s.name, s.labels.get("le")): s.value for s in fam.samples}
    assert samples[("dflash:submitted_draft_tokens_bucket", "0")] == 4
    assert samples[("dflash:submitted_draft_tokens_bucket", "2")] == 6
    assert samples[("dflash:submitted_draft_tokens_bucket", "+Inf")] == 10
    assert samples[("dflash:submitted_draft_tokens_sum", None)] == 2 * 2 + 3 * 4


# Accepted drafts per verify step of the demo pair at K = 15, concurrency 1 (bench/results/bench.json):
# bursty, far from geometric. Step costs shaped like the demo pair's on 2 CPU cores.
DEMO_HIST = {"tasks": [3, 42, 15, 18, 6, 6, 12, 9, 15, 0, 0, 3, 0, 0, 9, 18],
             "chat": [549, 135, 27, 6, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]}
DEMO_COST = {1: (lambda n: 0.0105 + 4e-4 * n, lambda d: 0.0072 + 3e-4 * d),
             8: (lambda n: 0.012 + 3e-4 * n, lambda d: 0.008 + 1e-4 * d),
             64: (lambda n: 0.03 + 3e-4 * n, lambda d: 0.01 + 7e-5 * d)}


def _simulate_hist(policy, hist, r, tv, td, steps=800, seed=0, warm=100, life=0, **hidden):
    p = np.array(hist, dtype=float) / sum(hist)

    def accepted(rng, k_prev):  # submitting k keeps min(A, k)
        return np.minimum(rng.choice(len(p), size=r, p=p), k_prev)

    return _closed_loop(policy, r, accepted, lambda n, _r: tv(n), td, steps, warm=warm, seed=seed, life=life,
                        **hidden)


@pytest.mark.parametrize("prompt_set,r", [("tasks", 1), ("tasks", 8), ("tasks", 64), ("chat", 1), ("chat", 64)])
def test_demo_shaped_acceptance_and_costs(prompt_set, r):
    """Tokens per second pooled over 3 seeds (one seed's run moves by ~0.5 %: chat at batch 1
    sits at 0.969-0.975 of no drafts per seed, 0.972 on average)."""
    tv, td = DEMO_COST[r]
    seeds = (0, 1, 2)

    def tok_s(**kw):
        return sum(_simulate_hist(AdaptivePolicy(15, **kw), DEMO_HIST[prompt_set], r, tv, td, seed=s) for s in seeds) / 3

    fixed = {k: tok_s(fixed=[k]) for k in (0, 1, 2, 3, 5, 7, 11, 15)}
    ours = tok_s()
    best = max(fixed, key=fixed.get)
    print(f"{prompt_set} c={r}: adaptive {ours:.0f} tok/s, none {fixed[0]:.0f}, best fixed K={best} {fixed[best]:.0f}")
    assert ours >= 0.97 * fixed[0] and ours >= 0.95 * fixed[best]


@pytest.mark.parametrize("r", [1, 8])
def test_follows_a_change_of_workload(r):
    """Prompts the drafter knows after a long run of prompts it does not (a benchmark's next cell,
    or traffic changing): within one short cell (~250 steps at batch 1) the policy must draft deep
    again, instead of holding the old curve for the positions its short drafts stopped reaching."""
    tv, td = DEMO_COST[r]
    steps = 260 if r == 1 else 60  # a cell of 64 short requests (~4 verify steps each)
    ratios = []
    for seed in (0, 1, 2):  # one seed alone read 0.898-0.913 at batch 1 across versions of the policy
        p = AdaptivePolicy(15)
        _simulate_hist(p, DEMO_HIST["chat"], r, tv, td, steps=1500, life=4, seed=seed)
        ours = _simulate_hist(p, DEMO_HIST["tasks"], r, tv, td, steps=steps, seed=seed + 1, warm=0, life=4)
        best = _simulate_hist(AdaptivePolicy(15, fixed=[15]), DEMO_HIST["tasks"], r, tv, td, steps=steps,
                              seed=seed + 1, warm=0, life=4)
        ratios.append(ours / best)
    print(f"tasks after chat, c={r}: adaptive / fixed K=15 {np.mean(ratios):.3f} ({', '.join(f'{x:.3f}' for x in ratios)})")
    assert np.mean(ratios) >= 0.9


def _tasks_at_batch_1_after(cells, seed: int, steps: int, life: int, hidden: bool = False, cost=None) -> float:
    """Tasks at batch 1 for ``steps`` steps, tokens per second of the adaptive policy over K = 15,
    after the policy first ran ``cells`` ((prompt set, batch, steps, request life, seed), in order);
    ``hidden``: with the engine's costs no clock of the policy sees (``_hidden``); ``cost``: the
    step costs per batch size (DEMO_COST unless given)."""
    cost = DEMO_COST if cost is None else cost

    def extra(r):
        return _hidden(r, cost) if hidden else {}

    p = AdaptivePolicy(15)
    for hist, r, n, lf, s in cells:
        _simulate_hist(p, DEMO_HIST[hist], r, *cost[r], steps=n, seed=s, life=lf, **extra(r))
    ours = _simulate_hist(p, DEMO_HIST["tasks"], 1, *cost[1], steps=steps, seed=seed, warm=0, life=life,
                          **extra(1))
    best = _simulate_hist(AdaptivePolicy(15, fixed=[15]), DEMO_HIST["tasks"], 1, *cost[1], steps=steps,
                          seed=seed, warm=0, life=life, **extra(1))
    return ours / best


def _hidden(r, cost=None):
    """The engine as the policy cannot see it, at batch r: a plain step more in each drafting
    call (the deferred context write), half one in the first plain step after it; and the door
    (requests arriving while drafting does not pay never draft but 4, ``_closed_loop``)."""
    tv = (DEMO_COST if cost is None else cost)[r][0](r)
    return dict(hidden_draft=tv, transient=0.5 * tv, sentinels=4)


def test_drafts_again_at_batch_1_soon_after_a_long_run_at_batch_64_without_drafts():
    """The bench's tasks c = 1 cell after the free c = 64 one: the acceptance evidence gathered at
    batch 64 (~230 rows) aged at batch 1 by the step decay alone (~470 steps to fall to a couple of
    rows), probes added a row each, and the policy did not draft again within the cell (mean K per
    repeat 14.1 fresh, then 0.0 and 0.0 in session 17's full check). With the evidence held to
    ``rows_per_request`` rows per decoding request, it follows the new batch within a few probes.
    Without it (``rows_per_request = 0``) this test fails: 0.78 / 0.64 of K = 15."""
    def after(batch64_steps, seed):
        cells = (("tasks", 1, 200, 40, seed), ("chat", 64, batch64_steps, 4, seed))
        return _tasks_at_batch_1_after(cells, seed, steps=300, life=40)

    short, long = (np.mean([after(n, s) for s in range(4)]) for n in (100, 300))
    print(f"tasks at batch 1 after chat at batch 64 (100 / 300 steps): adaptive / K=15 {short:.3f} / {long:.3f}")
    assert short >= 0.9 and long >= 0.88


def test_probes_at_batch_1_come_soon_when_the_drafter_was_only_timed_on_batch_64_blocks():
    """A fresh engine whose first traffic is prompts the drafter does not know at batch 64, then
    prompts it knows at batch 1 (in the engine: free c = 64, then tasks c = 1; session 30, scratch
    ``probedue.py``). The drafter forward was timed only on blocks of hundreds of tokens, with a
    batch's fixed work in each call, and its line priced batch 1's 16-token block at 8.4 ms
    against 1.8; a probe looked like ~3 plain steps lost, probes came ~150 steps apart, and the
    engine went 200-530 steps without drafting. A probe's modelled loss now counts only where a
    block of about its size was timed (``CostModel.draft_known_near``). Without that, this reads
    ~0.52 of K = 15 (ENGINE_COST, 4 seeds: 0.47-0.54); with it ~0.91 (0.78-0.97)."""
    ratios = [_tasks_at_batch_1_after((("chat", 64, 60, 4, seed),), seed, steps=200, life=20, hidden=True,
                                      cost=ENGINE_COST) for seed in range(4)]
    print(f"tasks at batch 1 after a fresh start at batch 64: adaptive / K=15 {', '.join(f'{x:.3f}' for x in ratios)}")
    assert np.mean(ratios) >= 0.85


def test_the_drafter_forward_is_known_only_near_the_blocks_it_was_timed_on():
    cm = CostModel()
    assert not cm.draft_known_near(16, 1)
    cm.observe_step(0.01, 64)
    cm.observe_draft(0.02, 704, 44)
    assert cm.draft_known_near(704, 44) and cm.draft_known_near(200, 16) and not cm.draft_known_near(16, 44)
    assert not cm.draft_known_near(704, 4)  # a batch ~10x away: its fixed work differs
    cm.observe_draft(0.012, 64, 64)  # a probe of 4 requests at batch 64 (the rest closed at the door)
    assert cm.draft_known_near(16, 16) and not cm.draft_known_near(16, 1)
    for _ in range(CostModel.LOCAL_WITHIN + 1):
        cm.observe_step(0.01, 64)
    assert not cm.draft_known_near(704, 44)  # timed too long ago


def test_one_timing_at_batch_1_prices_the_drafting_call_there_after_probes_at_batch_64():
    """Probes at batch 64 behind the door draft for 4 requests: blocks of 36-64 tokens in calls
    that also carry the batch's fixed work (vLLM's drafter input preparation, the context write
    of 64 verified rows), ~14.6 ms in the engine. A line in block tokens alone priced batch 1's
    16-token block at 15.2 ms against ~5.7 measured, and three probes at batch 1 brought it to
    10.5, then 7.0 (session 32, ``bench profile trace``, tasks c = 1 after free c = 64). Priced
    in its batch too, the first timing at batch 1 is enough."""
    cm = CostModel()
    for i in range(40):
        cm.observe_step(0.049, 64)
        if i % 4 == 0:
            cm.observe_draft(0.0146 if i % 8 == 0 else 0.0140, 64 if i % 8 == 0 else 36, 64)
    cm.observe_step(0.005, 1)
    cm.observe_draft(0.0057, 16, 1)
    assert float(cm.t_draft(16, 1)) == pytest.approx(0.0057, rel=0.2)
    assert float(cm.t_draft(64, 64)) == pytest.approx(0.0146, rel=0.1)


def test_stops_drafting_within_a_few_steps_when_the_first_draft_stops_being_accepted():
    """Chat at batch 1 after tasks at batch 1 and 64 (the full check's chat c = 1 cell after the
    strong cells; in the engine 0.78-0.80 of K = 0 in session 21's two runs): the curve held 16
    rows of g(1) ~0.98 and moved by ~1/17 per verified row, so the policy drafted for ~20 of the
    first 35 steps at a real g(1) of ~0.25. With the change of workload detected on the first
    draft's recent acceptance (``AcceptanceModel.observe``), the old evidence is cut to a
    quarter: 5 drafted steps, and 0.944 of K = 0 over 300 steps against 0.893 without (six seeds,
    the engine's hidden costs; with ``shift_gap`` out of reach this test fails)."""
    def chat_after(seed):
        p = AdaptivePolicy(15)
        for hist, r, n, lf in (("tasks", 1, 200, 40), ("tasks", 64, 60, 4)):
            _simulate_hist(p, DEMO_HIST[hist], r, *DEMO_COST[r], steps=n, seed=seed, life=lf, **_hidden(r))
        shifts = p.acceptance.shifts
        ours = _simulate_hist(p, DEMO_HIST["chat"], 1, *DEMO_COST[1], steps=300, seed=seed, warm=0, life=20,
                              **_hidden(1))
        k0 = _simulate_hist(AdaptivePolicy(15, fixed=[0]), DEMO_HIST["chat"], 1, *DEMO_COST[1], steps=300, seed=seed,
                            warm=0, life=20, **_hidden(1))
        return ours / k0, p.acceptance.shifts - shifts

    runs = [chat_after(s) for s in range(6)]
    ratios = [r for r, _ in runs]
    print(f"chat at batch 1 after tasks: adaptive / K=0 per seed {', '.join(f'{x:.3f}' for x in ratios)}; "
          f"changes detected {[n for _, n in runs]}")
    assert np.mean(ratios) >= 0.93 and min(ratios) >= 0.9


def test_a_probe_is_credited_with_the_drafts_it_got_accepted():
    """vLLM 0.32 runs the DFlash drafter before its bookkeeping, so each plan comes before the
    verify of its own step is observed (``_closed_loop`` keeps that order): a probe's accepted
    drafts are known one plan after its own period. Read at that period's plan, they were always
    0, and a probe that got 4-8 drafts accepted at batch 1 was measured to lose 2.5-5 plain steps
    (in the engine, tasks at batch 1 after free at batch 64: probes ~130 steps apart, 160 steps
    before drafting again). Here with the engine's hidden costs (``_hidden``), tasks at batch 1
    after chat at batch 64: before the fix one seed of six stayed at 0.57 of K = 15 (probes at
    steps 3, 128, 241, 290), the six 0.90 pooled; after it 0.94 at worst, 0.97 pooled."""
    def after(seed):
        cells = (("tasks", 1, 200, 40, seed), ("chat", 64, 300, 4, seed))
        return _tasks_at_batch_1_after(cells, seed, steps=300, life=40, hidden=True)

    ratios = [after(s) for s in range(6)]
    print(f"tasks at batch 1 after chat at batch 64, probes' hidden costs: adaptive / K=15 per seed "
          f"{', '.join(f'{x:.3f}' for x in ratios)}")
    assert min(ratios) >= 0.85 and np.mean(ratios) >= 0.94


def _weak_cells(seed):
    """The full check's cells before its second tasks c = 1 cell, in the simulation's terms."""
    return (("tasks", 1, 200, 14, seed), ("tasks", 64, 60, 4, seed), ("chat", 1, 900, 20, seed),
            ("chat", 64, 50, 4, seed), ("chat", 1, 900, 20, seed + 7), ("chat", 64, 50, 4, seed + 7))


def test_a_probe_that_paid_for_itself_brings_the_next_one_soon():
    """The full check's order: tasks at batch 1 after long runs of chat at batch 1 and 64, whose
    probes were measured to lose ~2.5-2.9 plain steps each (probes spaced ~130 steps at 2 %). A
    probe whose accepted drafts paid for it sets its batch bucket's loss at once; averaged in
    with the old one instead, the next probe waited ~75 steps. Tasks at batch 1 over 250 steps,
    six seeds, adaptive / K = 15: 0.77 pooled (worst 0.56) before session 21, 0.80 (0.58) with
    the accepted drafts credited alone, 0.84 (0.69) with both. Six seeds were a lottery: with
    thirty, session 24's code read 0.86 pooled, 10th percentile 0.71 (worst 0.56), where seeds
    0-5 alone read 0.86 at worst. Session 25 (a surprising verify brings a second probe at once,
    a batch 4x from the last probe's brings one after ``probe_every`` steps): 0.91, 10th
    percentile 0.83."""
    def after(seed):
        return _tasks_at_batch_1_after(_weak_cells(seed), seed, steps=250, life=14, hidden=True)

    ratios = [after(s) for s in range(30)]
    p10 = float(np.percentile(ratios, 10))
    print(f"tasks at batch 1 after the weak cells, 30 seeds: adaptive / K=15 {np.mean(ratios):.3f} pooled, "
          f"10th percentile {p10:.3f}, worst {min(ratios):.3f}")
    assert np.mean(ratios) >= 0.88 and p10 >= 0.75


def test_a_surprising_verify_brings_the_next_probe_at_once():
    """While drafting does not pay (a curve of ~0.3 per position), a verify with a row whose
    accepted run the curve gives less than 0.1 per row of the batch brings a probe on the next
    plan, though one row does not move the curve enough to draft (a change of workload needs
    1.6 rows' worth): at batch 64 one row accepting 6 of 11 (~0.1 % under the curve); a run the
    curve expects (3 of 11 among 64 rows, 2 of 11 at batch 1) does not. (At batch 1 one long run
    moves this thin curve enough to draft on its own.)"""
    def weak_policy(r):  # not drafting, the curve low, no probe due on its own
        return _dormant_policy(r, 0.75, 600, lambda p: p.acceptance.rates()[0] < 0.4 and p.steps_since_draft > 0
                               and not p._probe_due(p.optimum, num_reqs=r, ahead=1))

    for r, accepted, probes_now in ((64, 6, True), (64, 3, False), (1, 2, False)):
        p = weak_policy(r)
        ids = [f"x{i}" for i in range(r)]
        a = np.zeros(r, dtype=np.int64)
        a[0] = accepted
        p.acceptance.observe(ids, np.full(r, 11), a)
        k, q = p.plan([f"z{i}" for i in range(r)], np.ones(r, dtype=bool))  # new requests: no skill of their own
        assert (q > 0) == probes_now, (r, accepted, q, p.steps_since_draft)


# The engine's step costs at batch 1, 8 and 64, fitted to the demo pair's full check of session 23
# (bench/results/bench-adaptive.json: tasks / code / chat, fixed K = 0..15; seconds): the plain
# step (T_v + T_o of `none`), a jump on any drafted step (vLLM's speculative path: T_o 0.4 -> 1.0
# ms and T_v +0.9 ms at batch 1) plus a slope per verified token, and a drafter call nearly flat
# in block tokens (2.2-2.6 ms at 2 tokens, 2.9-3.3 at 16 on batch 1). DEMO_COST, from an older
# drafter, prices batch 1's plain step at 10.9 ms and the block at 0.3 ms per token.
ENGINE_COST = {1: (lambda n: 0.0040 + (n > 1) * (0.0012 + 1.1e-4 * (n - 1)), lambda d: 0.0023 + 5e-5 * d),
               8: (lambda n: 0.0060 + (n > 8) * (0.0020 + 8e-5 * (n - 8)), lambda d: 0.0026 + 4.5e-5 * d),
               64: (lambda n: 0.0175 + (n > 64) * (0.0050 + 4e-5 * (n - 64)), lambda d: 0.0050 + 2.5e-5 * d)}


def test_engine_costs_tasks_at_batch_1_after_the_weak_cells_matches_the_best_fixed_k():
    """The bench's worst cell, reproduced in the simulation with the engine's costs
    (ENGINE_COST): tasks at batch 1 after the full check's weak cells. Session 25: adaptive /
    K = 15 per seed 0.92, 0.88, 0.52, 0.90, 0.73, 0.83 (0.80 pooled; the bench read 0.53 in
    session 23); with the two probe rules of df70f95 0.82, 0.87, 0.70, 0.62, 1.00, 0.85 (0.81;
    over 30 seeds 0.81 -> 0.91 pooled, see test_a_probe_that_paid_for_itself_brings_the_next_one_soon;
    the bench read 0.98 on df70f95). At batch 1 a probe loses ~2.6 plain steps, so at the 2 % budget probes come
    ~130 steps apart, and one probe's row rarely tells tasks from chat (tasks accept 0-1 drafts
    of 15 in 29 % of rows). A strict xfail until session 33. With the door in the simulation
    (``_hidden``: requests arriving while drafting does not pay never draft but 4, as in the
    engine) the code before session 33 read 0.97, 0.85, 0.99, 0.84, 0.61, 0.80 (0.85; the
    engine: 0.57-0.91 in sessions 31-32): a probe at batch 64 drafts for 4 requests, so the
    drafter's line learned a 64-token block at a batch's fixed cost and priced batch 1's
    16-token block at ~2.7x its cost (the engine, ``bench profile trace``); and the 60 closed
    requests were left out of the goodput. With the drafting call priced in its batch too
    (``CostModel.t_draft``) and every decoding request counted: 0.95, 0.97, 1.00, 0.94, 0.97,
    0.96 (0.965; scratch ``bench/results/s33/scratch/perseed.py ENGINE 6``)."""
    def after(seed):
        return _tasks_at_batch_1_after(_weak_cells(seed), seed, steps=250, life=14, hidden=True, cost=ENGINE_COST)

    ratios = [after(s) for s in range(6)]
    print(f"engine costs, tasks at batch 1 after the weak cells: adaptive / K=15 per seed "
          f"{', '.join(f'{x:.3f}' for x in ratios)}")
    assert np.mean(ratios) >= 0.95


@pytest.mark.parametrize("r", [1, 64])
def test_probes_are_spaced_by_what_they_are_measured_to_cost(r):
    """While drafting does not pay, probes cost what no clock of the cost model sees: the deferred
    context K/V written in the probe's drafting call, the first plain step after drafted ones
    (on the demo pair's free prompts the drafter calls of probes alone were 2.5-4 % of the step
    time, twice the 2 % budget). Spaced by their measured loss, probes stay near the budget."""
    tv, td = DEMO_COST[r]
    hidden = _hidden(r)

    def tok_s(**kw):
        return sum(_simulate_hist(AdaptivePolicy(15, **kw), DEMO_HIST["chat"], r, tv, td, steps=2000, seed=s, **hidden)
                   for s in (0, 1, 2)) / 3

    ours, none = tok_s(), tok_s(fixed=[0])
    print(f"chat c={r}, unpriced probe costs: adaptive / no drafts {ours / none:.3f}")
    assert ours >= 0.975 * none


def test_idle_time_between_steps_is_not_step_time():
    """The engine reports each step's start and the gap since the previous drafting call: a
    server that sat idle for seconds (between benchmark cells, between bursts of traffic) must
    not teach the cost model that a step costs seconds."""
    p = AdaptivePolicy(15)
    t, n = 0.0, 1
    for step in range(60):
        start = t + (5.0 if step in (3, 40) else 0.001)  # idle twice, once before much is known
        now = start + 0.010
        p.on_step(now, n, 1, start, gap=start - t)
        k, _ = p.plan(["a"], np.ones(1, dtype=bool))
        n = 1 + int(k.sum())
        t = now
    assert float(p.cost.t_verify(1)) == pytest.approx(0.011, rel=0.25)


def test_plain_steps_do_not_recompute_the_optimum_every_step():
    """While drafting does not pay, the optimum is recomputed only every ``replan_every`` steps
    (or when the batch changes), even when it holds a few drafts below the margin: on CPU a
    plain step of a small model is ~3 ms, and recomputing every step cost ~0.1 ms of it."""
    p = AdaptivePolicy(15)
    calls = []
    optimum = p._optimum
    p._optimum = lambda *a: calls.append(p.step) or optimum(*a)
    # A poor drafter on a step with a large fixed speculative cost: drafting never pays.
    _simulate(p, np.full(4, 0.3), lambda n, r: 0.003 + 0.002 * (n > r) + 1e-5 * n, lambda d: 0.002 + 1e-5 * d,
              steps=400)
    late = [s for s in calls if s > 200]  # steps 201..400; the steps near a probe and after its verify replan too
    assert len(late) <= 100, len(late)


def test_drafting_steps_recompute_the_optimum_every_few_steps_of_a_steady_batch():
    """While drafting pays and the batch stays the same, the optimum is recomputed every
    ``replan_every`` steps, not after every verify: on the demo pair at batch 1 the computation
    was ~3 % of a drafted step that a fixed K does not pay. The plan still follows the drafter."""
    p = AdaptivePolicy(15)
    calls = []
    optimum = p._optimum
    p._optimum = lambda *a: calls.append(p.step) or optimum(*a)
    tv, td = (lambda n, r: 0.003 + 1e-5 * n), (lambda d: 0.001 + 1e-5 * d)
    fast = _simulate(p, np.full(4, 0.9), tv, td, steps=400)
    late = [s for s in calls if s > 200]
    assert len(late) <= 200 // p.replan_every + 10, len(late)
    assert fast > 1.5 * 4 / 0.00304  # well above no drafting (4 tokens per ~3 ms step)


@pytest.mark.parametrize("r,life", [(1, 2), (8, 1)])
def test_short_requests_do_not_recompute_the_optimum_every_step(r, life):
    """While drafting pays, requests that end and are replaced every step or two (code prompts on
    the demo pair: ~13 tokens, 2-3 drafted steps each) or a batch moving by a request or two keep
    the optimum's prices: each new request's k comes from its threshold and cap, and the whole
    optimum is recomputed every ``replan_every`` steps. Recomputed at every change of members, it
    ran on 128 of 136 drafted steps in the engine (code, batch 1): ~0.6 ms of ~11.6. Goodput
    stays within 1 % of recomputing it every step."""
    hist, (tv, td) = DEMO_HIST["tasks"], DEMO_COST[r]
    results = {}
    for every_step in (False, True):
        ratios, n_calls = [], 0
        for seed in (0, 1, 2):
            p = AdaptivePolicy(15)
            if every_step:
                p.replan_every = 1
            calls = []
            optimum = p._optimum
            p._optimum = lambda *a, _o=optimum, _c=calls, _p=p: _c.append(_p.step) or _o(*a)
            ratios.append(_simulate_hist(p, hist, r, tv, td, steps=600, seed=seed, life=life))
            n_calls += sum(s > 300 for s in calls)
        results[every_step] = (np.mean(ratios), n_calls / 3)
    (ours, calls), (every, every_calls) = results[False], results[True]
    print(f"r={r} life={life}: {ours:.1f} vs {every:.1f} tok/s; "
          f"optimum on {calls:.0f} vs {every_calls:.0f} of 300 steps")
    assert calls <= 300 / AdaptivePolicy(15).replan_every + 20, calls
    assert ours >= 0.99 * every


def test_a_settled_drafting_plan_is_recomputed_less_often_and_at_once_after_a_change_of_workload():
    """Short requests at batch 1 (code prompts on the demo pair: two steps a request, so the
    batch's members change on every plan): once the optimum's prices came out the same three
    times running, it is recomputed every 16 steps instead of every 4 (``_replan_interval``;
    0.5-0.8 ms each in the engine, session 43), with goodput within 1 % of recomputing every 4.
    A change of workload (``AcceptanceModel.shifts``) replans at the next plan, whatever the
    interval."""
    hist, (tv, td) = DEMO_HIST["tasks"], DEMO_COST[1]
    results = {}
    for backoff in (1, AdaptivePolicy.REPLAN_BACKOFF):
        ratios, n_calls = [], 0
        for seed in (0, 1, 2):
            p = AdaptivePolicy(15)
            p.REPLAN_BACKOFF = backoff
            calls = []
            optimum = p._optimum
            p._optimum = lambda *a, _o=optimum, _c=calls, _p=p: _c.append(_p.step) or _o(*a)
            ratios.append(_simulate_hist(p, hist, 1, tv, td, steps=600, seed=seed, life=2))
            n_calls += sum(s > 300 for s in calls)
        results[backoff] = (np.mean(ratios), n_calls / 3)
    (every4, n4), (ours, n) = results[1], results[AdaptivePolicy.REPLAN_BACKOFF]
    print(f"backoff: {ours:.1f} vs {every4:.1f} tok/s; optimum on {n:.0f} vs {n4:.0f} of 300 steps")
    assert n4 >= 300 / 4 - 5 and n <= 300 / 16 + 5, (n4, n)
    assert ours >= 0.99 * every4
    # The last policy (seed 2) drafts with a settled optimum: the same step plans again without a
    # recomputation; after a run of rejected first drafts (a shift), the next plan recomputes.
    c, acc = p._optimum_cache, p.acceptance
    assert c.drafts and c.streak >= 3
    p.plan(["z0"], np.ones(1, dtype=bool))
    before, shifts = len(calls), acc.shifts
    p.plan(["z1"], np.ones(1, dtype=bool))
    assert len(calls) == before
    for _ in range(4):
        acc.observe(["z1"], np.array([15]), np.array([0]))
    assert acc.shifts > shifts
    p.plan(["z2"], np.ones(1, dtype=bool))
    assert len(calls) == before + 1


@pytest.mark.parametrize("r", [1, 8, 64])
def test_while_drafting_does_not_pay_the_optimum_is_recomputed_on_few_steps(r):
    """The policy's host work on steps without drafts (the weak cells' floor): the optimum is
    recomputed at a new batch size, a probe's verify, a probe due, and otherwise every
    ``IDLE_REPLAN`` steps. In the engine (chat c = 1, session 30) the policy's plan took ~93 us
    per step with 16 there, ~73 with 32 (the plan pinned at K = 0: ~21); 32 also came out better
    in simulation (tasks at batch 1 after the weak cells: 0.934 -> 0.954 of K = 15 with the
    engine's costs, 30 seeds). Here: at most one recomputation per 20 steps over 600 steps of chat
    (43-49 with 16, 23-31 with 32)."""
    counts = []
    for seed in (0, 1, 2):
        p = AdaptivePolicy(15)
        calls = []
        optimum = p._optimum
        p._optimum = lambda *a, _o=optimum, _c=calls, _p=p: _c.append(_p.step) or _o(*a)
        _simulate_hist(p, DEMO_HIST["chat"], r, *ENGINE_COST[r], steps=900, seed=seed, life=20, **_hidden(r, ENGINE_COST))
        assert p.dormant
        counts.append(sum(s > 300 for s in calls))
    print(f"r={r}: the optimum recomputed on {counts} of 600 steps without drafts")
    assert np.mean(counts) <= 600 / 20


def _wandering_batch(policy, seed: int, steps: int, deferred: bool = False) -> list:
    """A batch wandering between 1 and 32 requests (every log2 bucket edge crossed, moves by a
    request, by a quarter and more, and now and then by 20: the level rule), prompts the drafter mostly does not know,
    with a stretch it knows in the middle (probes, drafting, back to no drafts), short requests:
    the plans, step by step. ``deferred``: driven as the proposer drives it (``_idle_plan``):
    in the idle window ``idle_step`` alone, the step's ``on_step`` handed over at the window's end."""
    rng = np.random.default_rng(seed)
    r, ids, gen, planned, t = 6, [], 0, {}, 0.0
    held, plans = [], []
    for step in range(steps):
        r = int(np.clip(r + rng.choice([-3, -1, 0, 0, 0, 0, 1, 3]) + (rng.random() < 0.01) * rng.choice([-20, 20]), 1, 32))
        while len(ids) < r:
            gen += 1
            ids.append(f"w{gen}")
        drop = rng.random(len(ids)) < 0.05  # requests that end, and new ones in their place
        ids = [f"w{(gen := gen + 1)}" if d else x for x, d in zip(ids, drop)][:r]
        k_prev = np.array([planned.get(i, 0) for i in ids], dtype=np.int64)  # drafts of those still here
        n = r + int(k_prev.sum())
        step_start = t
        t += 0.004 + 2e-4 * r + 1e-4 * (n - r) + 0.0012 * (n > r)
        p_acc = 0.9 if steps // 3 <= step < steps // 2 else 0.2
        a = np.minimum(rng.geometric(1 - p_acc, len(ids)) - 1, k_prev)
        clocks = (t, n, r, step_start, 0.0)
        if deferred and policy.idle_left > 0 and not k_prev.any() and policy.idle_step(r, r):
            held.append(clocks)
            k, q = np.zeros(r, dtype=np.int64), 0
        else:
            for c in held:
                policy.on_step(*c)
            held = []
            policy.on_step(*clocks)
            d = k_prev > 0
            policy.acceptance.observe([ids[i] for i in np.flatnonzero(d)], k_prev[d], a[d])
            k, q = policy.plan(ids, np.ones(r, dtype=bool))
            if q:
                b = int(np.count_nonzero(k)) * (q + 1)
                policy.on_draft_time(0.0023 + 5e-5 * b, b, r)
                t += 0.0023 + 5e-5 * b
        plans.append((q, k.tolist()))
        planned = dict(zip(ids, k.tolist()))
    for c in held:  # the last window's clocks
        policy.on_step(*c)
    return plans


@pytest.mark.parametrize("seed", [0, 1])
def test_the_idle_window_plans_every_step_as_the_policy_would_without_it(seed):
    """The idle window (``AdaptivePolicy._idle_window``, ``idle_step``) is host work saved, not a
    change of policy: a batch wandering across log2 buckets and by a quarter and more, over a
    change of workload, planned the same on every step with windows, without them, and driven
    as the proposer drives them (the window's clocks handed over at its end). And the window
    covers most steps without drafts."""
    steps = 1500
    plain = AdaptivePolicy(15)
    plain._idle_window = lambda *a: 0
    without = _wandering_batch(plain, seed, steps)
    windowed = AdaptivePolicy(15)
    idle = []
    step_fn = windowed.idle_step
    windowed.idle_step = lambda *a: (lambda ok: (idle.append(ok), ok)[1])(step_fn(*a))
    assert _wandering_batch(windowed, seed, steps) == without
    deferred = AdaptivePolicy(15)
    assert _wandering_batch(deferred, seed, steps, deferred=True) == without
    assert deferred.step == plain.step and deferred.cost.plain.n == plain.cost.plain.n
    undrafted = sum(q == 0 for q, _ in without)
    print(f"seed {seed}: {sum(idle)} idle steps of {undrafted} without drafts ({steps} steps, "
          f"{sum(q > 0 for q, _ in without)} drafted)")
    assert sum(q > 0 for q, _ in without) >= 10 and sum(idle) >= 0.5 * undrafted


def test_the_idle_window_ends_before_the_draft_timing_near_either_end_of_its_batches_ages_out():
    """The window runs at any batch within a quarter of the optimum's (``idle_step``), and those
    batches straddle a log2 bucket: at batch 16 they are 13-20, buckets 3 and 4. A drafter
    timing known near batch 13 (bucket 1, two buckets away) but not near 16 (three away) ages
    out inside a window sized from batch 16 alone; the window takes the shorter of its two end
    batches' ages (session 33), so that no step of the window at batch 13 is planned with a
    drafter price that went stale during it."""
    ids = [f"w{i}" for i in range(16)]

    def planned_dormant(p):  # a plan without drafts at batch 16, no probe due within the window's first steps
        p.plan(ids, np.ones(16, dtype=bool))
        c = p._optimum_cache
        return (p.dormant and c.batch[0] == 16 and p._probe_meas is None and not p._last_submitted
                and not p._probe_due(c.opt, num_reqs=16, ahead=5))
    p = _dormant_policy(16, 0.9, 400, planned_dormant)
    c, cm = p._optimum_cache, p.cost
    bb = CostModel._bucket(c.opt.probe_block)
    recent = {(bb, CostModel._bucket(64)): cm._steps}  # near batch 16-20, not 13
    cm._draft_near = dict(recent)
    unbounded = p._idle_window(c, 16)
    assert unbounded > 4, unbounded  # bounded by the probe spacing and IDLE_REPLAN only
    cm._draft_near = {**recent, (bb, CostModel._bucket(2)): cm._steps - (cm.LOCAL_WITHIN - 5)}  # near 13 only
    assert cm.draft_known_for(c.opt.probe_block, 13) == 5 and cm.draft_known_for(c.opt.probe_block, 16) > 5
    assert p._idle_window(c, 16) == 4


def test_a_batch_moving_by_a_request_keeps_the_prices_and_a_jump_replans():
    """A batch of 8 where one request is in prefill every other step (7 or 8 decoding) plans with
    the optimum's prices, recomputed every ``replan_every`` steps; a batch twice as large is
    planned afresh at once (its prices differ: that is what the cost side is for)."""
    p = AdaptivePolicy(15)
    _simulate_hist(p, DEMO_HIST["tasks"], 8, *DEMO_COST[8], steps=300, seed=0)
    calls = []
    optimum = p._optimum
    p._optimum = lambda *a: calls.append(p.step) or optimum(*a)
    ids, now, drafted = [f"m{i}" for i in range(16)], 100.0, 0
    for step in range(41):
        r = 8 if step < 40 else 16
        dec = np.ones(r, dtype=bool)
        dec[step % r] = step % 2 == 0 or r == 16
        p.on_step(now + 0.02, r + 3 * int(dec.sum()), r, now)
        now += 0.02
        before = len(calls)
        k, q = p.plan(ids[:r], dec)
        assert k[~dec].sum() == 0
        drafted += q > 0
    assert drafted >= 34  # all but the plain-step anchors
    assert before <= 40 // p.replan_every + 4, before
    assert len(calls) == before + 1  # the jump to 16: planned afresh


def test_without_drafts_a_batch_moving_by_a_request_keeps_the_optimum_and_a_jump_replans():
    """While drafting does not pay, the batch of a busy server moves by a request or two nearly
    every step (one ends, the next is in prefill). Recomputed at every such move, the policy's
    plan took 334 / 445 us per step at chat c = 16 / 64 in the engine (session 30, one run each);
    kept while the batch stays within a quarter (as while drafting), 266 / 364 us. A batch 4x
    smaller is planned afresh at once."""
    p = AdaptivePolicy(15)
    _simulate_hist(p, DEMO_HIST["chat"], 16, *ENGINE_COST[8], steps=400, seed=0, life=20, **_hidden(8, ENGINE_COST))
    assert p.dormant
    calls = []
    optimum = p._optimum
    p._optimum = lambda *a: calls.append(p.step) or optimum(*a)
    ids, now = [f"m{i}" for i in range(16)], 100.0
    for step in range(31):
        r = (16 if step % 2 else 15) if step < 30 else 4
        dec = np.ones(r, dtype=bool)
        dec[step % r] = step % 3 != 0  # now and then a request in prefill
        p.on_step(now + 0.008, r, r, now)
        now += 0.008
        before = len(calls)
        k, q = p.plan(ids[:r], dec)
        assert q == 0 or p.steps_since_draft == 0  # no drafts, probes aside
    assert before <= 2, calls
    assert len(calls) == before + 1  # the jump to 4: planned afresh


def test_plain_step_anchors_come_in_pairs_while_drafting():
    """While drafting pays, the plan pauses now and then for two steps: the first step after
    drafted ones costs more, so only the second measures a plain step. The spacing follows the
    optimum and moves from step to step; a pair must still be two steps (read off the spacing,
    most were one, and the plain-step line got no new measurement for hundreds of steps)."""
    p = AdaptivePolicy(15)
    qs = []
    plan = p.plan
    p.plan = lambda *a, **kw: (lambda kq: qs.append(kq[1]) or kq)(plan(*a, **kw))
    acc = iter(np.random.default_rng(0).uniform(0.75, 0.95, 100000))
    # A good drafter whose acceptance wanders: the optimum (and with it the spacing) moves.
    _closed_loop(p, 1, lambda rng, k: np.minimum(rng.geometric(1 - next(acc), 1) - 1, k),
                 lambda n, r: 0.010 + 1e-5 * n, lambda d: 0.002 + 2e-5 * d, steps=1500, warm=50)
    runs, run = [], 0
    for q in qs[100:]:
        if q == 0:
            run += 1
        elif run:
            runs.append(run)
            run = 0
    assert len(runs) >= 5 and min(runs) >= 2, runs
    assert p.cost.plain.n >= len(runs) // 2


def test_drafts_that_fit_the_padded_matmul_widths_are_added_and_no_width_grows():
    """On CPU the step's matmuls run at padded row counts (fixes/cpu_gemm_widths.py's bucket):
    drafts that fit the widths a plan already pays for are added to it (the deepest requests
    first), and no width of the verify (batch + sum k) or of the drafter (R_d (q + 1) rows, its
    head R_d q) grows. In the engine at batch 1 the policy submitted 11 of a 15-draft block on
    a third of tasks c = 1's steps at the cost of 15 (session 45, width_cost.py). The cost model
    is taught the drafts the plan priced, not the fill."""
    from dflash_vllm.fixes.cpu_gemm_widths import bucket

    p = AdaptivePolicy(15)
    k, q = p._fill_width(np.array([11]), 1)
    assert (k.tolist(), q) == ([11], 11)  # no width known (CUDA, padding off): the plan as it is
    p.width = bucket
    k, q = p._fill_width(np.array([11]), 1)
    assert (k.tolist(), q) == ([15], 15)  # 12 and 16 verified rows pad to 16; the block's 12 and 16 too
    k, q = p._fill_width(np.array([8]), 1)
    assert (k.tolist(), q) == ([8], 8)  # the head's 8 rows are exact: 9 would pad to 16
    k, q = p._fill_width(np.array([2, 1, 0]), 3)
    assert (k.tolist(), q) == ([2, 1, 0], 2)  # 6 verified rows: exact
    k, q = p._fill_width(np.array([3, 2, 0, 3]), 4)
    # 12 -> 16 of 16 verified rows; the block of 3 rows x 4 -> 3 x 5 (12 and 15 rows pad to 16, the head's 9 and 12 too)
    assert (k.tolist(), q) == ([4, 4, 0, 4], 4)
    rng = np.random.default_rng(0)
    grown = 0
    for _ in range(2000):
        r = int(rng.integers(1, 70))
        k0 = rng.integers(0, 16, r) * (rng.random(r) < 0.8)
        k0[rng.integers(r)] = max(1, int(k0.max()))
        k, q = p._fill_width(k0, r)
        rd, q0 = int(np.count_nonzero(k0)), int(k0.max())
        assert (k >= k0).all() and (k[k0 == 0] == 0).all() and q == int(k.max()) <= 15
        assert bucket(r + int(k.sum())) == bucket(r + int(k0.sum()))
        assert bucket(rd * (q + 1)) == bucket(rd * (q0 + 1)) and bucket(rd * q) == bucket(rd * q0)
        grown += int(k.sum() > k0.sum())
    assert grown > 500
    # Through plan(): at batch 1 a drafting plan fills its block.
    p = AdaptivePolicy(15)
    p.width = bucket
    qs = []
    plan = p.plan
    p.plan = lambda *a, **kw: (lambda kq: qs.append((kq[1], p.dormant)) or kq)(plan(*a, **kw))
    seen = []
    observe = p.cost.observe_step
    p.cost.observe_step = lambda sec, n, drafts=0, transient=False: (
        seen.append((n, drafts)), observe(sec, n, drafts=drafts, transient=transient))
    hist = np.array([3, 42, 15, 18, 6, 6, 12, 9, 15, 0, 0, 3, 0, 0, 9, 18], dtype=float)
    _closed_loop(p, 1, lambda rng, k: np.minimum(rng.choice(16, size=1, p=hist / hist.sum()), k),
                 lambda n, r: 0.004 + 0.0012 * (n > 1) + 3e-4 * (bucket(n) - 1), lambda d: 0.0023 + 2e-4 * bucket(d),
                 steps=600, warm=50)
    drafted = [q for q, dormant in qs[100:] if q and not dormant]  # (probes keep their depth)
    # (8: the drafter head's 8 rows are exact, 9 would pad to 16)
    assert len(drafted) > 100 and all(x <= 8 or x == 15 for x in drafted), sorted(set(drafted))
    # The cost model sees the drafts the plan priced, not the fill: they cost nothing (counted,
    # they taught it that every draft costs less, shallow plans included).
    assert all(n - d == 1 for n, d in seen), "the fill's drafts left the step's N0 as it was"
    priced = {d for n, d in seen[100:] if d}
    assert priced - set(range(9)) - {15}, sorted(priced)  # raw plans of 9-14 drafts, verified as 15


def test_request_skill_scales_the_first_position_only():
    """A request that did well (rho > 1) is more likely to get its first draft accepted; past
    that, the server-wide conditional rates hold (they are measured on requests that got that
    far), so one lucky request of prompts the drafter does not know is not planned as deep."""
    m = AcceptanceModel(8)
    for _ in range(200):  # server-wide: half the first drafts accepted, then 30 % per position
        a = np.where(np.arange(16) % 2 == 0, 0, np.minimum(np.random.default_rng(_).geometric(0.7, 16), 8))
        m.observe([f"r{i}" for i in range(16)], np.full(16, 8), a)
    for _ in range(3):
        m.observe(["lucky"], [8], [3])
    s = m.survival(["lucky", "new"])
    g = m.rates()
    assert s[0, 0] > 1.3 * s[1, 0]
    assert s[0, 1:] / s[0, 0] == pytest.approx(np.cumprod(g[1:]), rel=1e-9)  # deeper: the server-wide curve
    assert s[1] == pytest.approx(np.cumprod(g), rel=1e-9)


def test_plain_step_cost_is_learned_from_runs_of_plain_decode_steps():
    """The cost every plan is weighed against is a plain decode step. While the policy drafts,
    plain steps are few, the first plain step after drafted ones costs more (vLLM leaves its
    speculative path) and a step with a prompt in it more still: neither may set the price of
    a plain step (on the demo pair they made it 4.5-6 ms where it cost 2.6, and the policy went on
    drafting on prompts its drafter did not know)."""
    p = AdaptivePolicy(15)
    t, ids, dec = 0.0, ["a"], np.ones(1, dtype=bool)
    plain, switch, prompt = 0.003, 0.006, 0.011  # a plain step; the first after drafting; one with a prompt
    for step in range(600):  # the runner's order: the step (verifying last plan's drafts), then the plan
        n_prompt = 100 if step % 50 == 49 else 0  # a new request's prompt now and then
        last = p._last_submitted
        if last:
            dt = 0.0045 + 2e-5 * last
        elif n_prompt:
            dt = prompt
        else:
            dt = switch if p._prev_submitted > 0 else plain
        p.on_step(t + dt, 1 + last + n_prompt, 1, t)
        if last:
            p.acceptance.observe(ids, [last], [last])  # a drafter that pays: the policy drafts on
        t += dt
        k, q = p.plan(ids, dec)
        if q:
            p.on_draft_time(0.0015, q + 1, 1)
            t += 0.0015
    assert p.cost.plain.n >= 3
    assert float(p.cost.t_verify(1)) == pytest.approx(plain, rel=0.1)


def test_deep_positions_do_not_keep_an_old_workloads_rates():
    """Prompts the drafter knows (every draft accepted), then prompts it does not (the first draft
    mostly rejected): the deep positions are no longer reached, and must not keep reading 0.9+
    (they did, and the policy drafted 15 deep on chat after code at batch 1)."""
    m = AcceptanceModel(15)
    for _ in range(300):
        m.observe(["a"], [15], [14])
    assert m.rates()[5] > 0.9
    rng = np.random.default_rng(0)
    for _ in range(80):
        m.tick()
        m.observe(["b"], [15], [int(rng.random() < 0.25)])  # a quarter accept one draft
    g = m.rates()
    assert np.all(g[2:8] < 0.5), g.round(2)  # without the aging: 1.0 (the first position: 0.62)
    assert m.survival(["c"])[0, 3] < 0.05


def test_policy_trace_summarises_plans_per_window():
    """`dflash-vllm bench profile trace` prints, per window, how many steps drafted and the
    policy's model at the window's end; here on the simulator: a drafter that pays (every
    window drafts nearly every step), then one that does not (drafting stops)."""
    from dflash_vllm.bench.profile import PolicyTrace

    p, trace = AdaptivePolicy(15), PolicyTrace(window=40)
    p.plan = types.MethodType(trace.traced(AdaptivePolicy.plan), p)
    tv, td = DEMO_COST[1]
    _simulate_hist(p, DEMO_HIST["tasks"], 1, tv, td, steps=200, warm=0)
    start = len(trace.rows)
    _simulate_hist(p, DEMO_HIST["chat"], 1, tv, td, steps=400, warm=0, life=4)
    first, last = trace.summary(0, start), trace.summary(start)
    assert len(first) == 5 and len(last) == 10
    drafted = lambda line: int(line.split("drafted")[1].split("of")[0])  # noqa: E731
    assert all(drafted(x) >= 30 for x in first[:4]), first
    assert drafted(last[-1]) <= 4, last
    assert "G*/G0" in last[-1] and "plain steps seen" in last[-1]


def test_context_queue_drops_rows_of_requests_that_ended_and_keeps_write_order():
    """Queued context rows of a request that finishes (or is preempted) before the next drafter
    forward are never written; every other row is, in step order, so each slot ends with what
    writing every step at once would have left in it for the requests still running."""
    import torch

    from dflash_vllm.proposers.dflash import ContextQueue

    q = ContextQueue()
    log = []  # (step, req, slot, value): what an eager writer would have written, in order
    slots = {"a": iter(range(0, 100)), "b": iter(range(100, 200)), "c": iter(range(200, 300))}
    value = iter(range(1000, 2000))

    def step(batch, ended=()):
        q.end(set(ended))
        req_ids, counts, feats, slot = [], [], [], []
        for r, n in batch:
            req_ids.append(r)
            counts.append(n)
            for _ in range(n):
                s, v = next(slots[r]), next(value)
                slot.append(s)
                feats.append(v)
                log.append((r, s, v))
        t = torch.tensor(feats, dtype=torch.float32)[:, None].repeat(1, 3)
        q.add(t, torch.tensor(slot), torch.tensor(slot), req_ids, np.array(counts))

    step([("a", 1), ("b", 1), ("c", 5)])  # c's prompt
    step([("a", 1), ("b", 1), ("c", 1)])
    step([("a", 1), ("c", 1)], ended={"b"})  # b finished
    slots["d"] = iter([100, 101, 150, 151])  # b's freed slots, reused by d
    step([("a", 1), ("d", 3)], ended={"c"})  # c preempted
    slots["c"] = iter(range(300, 400))
    step([("a", 1), ("c", 7), ("d", 1)])  # c resumed: its whole context again
    assert q.rows == 7 + 3 + 2 + 4 + 9
    q.end(set())
    feats, pos, slot = q.take()
    assert q.rows == 0 and q.take() is None
    assert q.dropped == 2 + 7, q.dropped  # b's 2 rows, c's 7 rows before it was preempted
    written = [(int(s), int(f)) for s, f in zip(slot, feats[:, 0])]
    assert torch.equal(pos, slot) and feats.shape == (len(written), 3)
    # Step order kept (values were handed out in order), and the cache as an eager writer leaves it
    # for the slots the running requests own (a, d, the resumed c).
    assert [v for _, v in written] == sorted(v for _, v in written)
    eager, lazy = {}, {}
    for _, s, v in log:
        eager[s] = v
    for s, v in written:
        lazy[s] = v
    owned = [s for r, s, _ in log if r in ("a", "d") or r == "c" and s >= 300]
    assert {s: lazy[s] for s in owned} == {s: eager[s] for s in owned}
    assert not any(100 <= s < 200 and lazy.get(s) == v for r, s, v in log if r == "b")


def test_with_prefix_caching_only_an_ended_requests_partial_block_is_dropped():
    """With prefix caching a full block outlives its request (a later request with the same
    prefix reads its drafter context from the cache), so of an ended request's queued rows only
    those past its last full block are dropped, and nothing is shed."""
    import torch

    from dflash_vllm.proposers.dflash import ContextQueue

    q = ContextQueue(block_size=4)

    def step(batch, ended=()):
        q.end(set(ended))
        ids, counts, starts = [r for r, _, _ in batch], np.array([n for _, n, _ in batch]), np.array([s for _, _, s in batch])
        pos = torch.tensor([s + j for _, n, s in batch for j in range(n)])
        q.add(pos[:, None].float(), pos, pos, ids, counts, starts)

    step([("a", 6, 0), ("b", 3, 0), ("c", 2, 0)])  # prompts
    step([("a", 1, 6), ("b", 1, 3), ("c", 1, 2)])  # a: 7 tokens, b: 4 (one full block), c: 3
    q.shed(0)
    assert q.rows == 14 and not q.incomplete  # not shed: full blocks must be written
    step([("c", 1, 3)], ended={"a", "b"})
    feats, pos, slot = q.take()
    # a keeps block 0 (positions 0-3) and drops 4-6; b keeps its full block; c, running, all.
    assert pos.tolist() == [0, 1, 2, 3, 0, 1, 2, 0, 1, 3, 2, 3], pos.tolist()
    assert q.dropped == 3


@pytest.mark.parametrize("block_size", [None, 4])
def test_at_batch_1_the_queue_keeps_and_drops_the_rows_a_batched_queue_would(block_size):
    """At batch 1 each queued step holds one request's rows (``_keep`` takes them whole or not at
    all without array work, unless a block boundary splits them). What ends up written is the
    same as when the very steps were queued two requests at a time: the rows an ended request
    leaves past its last full block (all of them without prefix caching) and a shed request's
    generated rows are dropped, every other row is written, in step order."""
    import torch

    from dflash_vllm.proposers.dflash import ContextQueue

    def run(batched: bool):
        q = ContextQueue(block_size=block_size)
        q.ledger = block_size is not None
        ns = types.SimpleNamespace
        # a: a prompt of 6, then positions 6-10; b: a prompt of 5, then 5-9
        steps = [("a", 6, 0), ("b", 5, 0)] + [(r, 1, s - (r == "b")) for s in range(6, 11) for r in "ab"]
        if q.ledger:
            q.schedule([ns(req_id=r, prompt_token_ids=[0] * n, block_ids=([10 * k, 10 * k + 1, 10 * k + 2],),
                           num_computed_tokens=0) for k, (r, n) in enumerate((("a", 6), ("b", 5)), 1)], None)
        group = [steps[i:i + 2] for i in range(0, len(steps), 2)] if batched else [[x] for x in steps]
        for batch in group:
            q.end(set())
            ids, counts, starts = [r for r, _, _ in batch], np.array([n for _, n, _ in batch]), np.array([s for _, _, s in batch])
            pos = torch.tensor([s + j for _, n, s in batch for j in range(n)])
            tag = torch.tensor([ord(r) for r, n, _ in batch for _ in range(n)])
            q.add(pos[:, None].float(), pos, tag, ids, counts, starts)
        q.end({"a"})  # a ended at 11 tokens: with prefix caching its rows 0-7 (two full blocks) stay
        q.prune()
        q.shed(8)  # generated rows, an ended request's first: with prefix caching from the cut (4) on
        taken = q.take()
        rows = [] if taken is None else list(zip(taken[2].tolist(), taken[1].tolist()))
        return rows, q.dropped, q.shed_rows, sorted(q.incomplete)

    single, batched = run(False), run(True)
    assert single == batched, (single, batched)
    kept = [(chr(t), p) for t, p in single[0]]
    if block_size is None:  # a dropped whole, b shed whole
        assert kept == [] and single[1:] == (11, 10, ["b"])
    else:
        assert kept == [("a", p) for p in range(4)] + [("b", p) for p in range(4)], kept
        assert single[1:] == (3, 4 + 6, ["b"])



def _rows(req_ids, counts, start):
    import torch

    n = int(sum(counts))
    v = torch.arange(start, start + n, dtype=torch.float32)
    return v[:, None].repeat(1, 3), torch.arange(start, start + n), torch.arange(start, start + n)


def test_context_queue_sheds_the_oldest_requests_when_full_never_protected_ones():
    """At its limit the queue sheds whole requests, oldest first (never a protected one): they
    become incomplete, their later rows are never queued, and a request that finishes or is
    preempted is complete again (a resumed one writes its whole context anew)."""
    from dflash_vllm.proposers.dflash import ContextQueue

    q = ContextQueue()
    q.protected = {"s"}
    step_rows = [(["s", "a", "b"], [4, 6, 2]), (["s", "a", "b", "c"], [1, 1, 1, 5]), (["s", "a", "b", "c"], [1, 1, 1, 1])]
    v = 0
    for ids, counts in step_rows:
        q.end(set())
        q.add(*_rows(ids, counts, v), ids, np.array(counts))
        v += sum(counts)
    assert q.rows == 24
    q.shed(12)  # s is oldest but protected; a (8 rows) then b (4 rows) go
    assert q.incomplete == {"a", "b"} and q.rows == 12 and q.shed_rows == 12 and q.shed_requests == 2
    q.end(set())
    q.add(*_rows(["a", "c"], [1, 1], v), ["a", "c"], np.array([1, 1]))  # a's new row: never queued
    assert q.rows == 13 and q.shed_rows == 13
    q.end({"a"}, None)  # a finished (or was preempted): complete again
    assert q.incomplete == {"b"}
    feats, pos, slot = q.take()
    owners = [r for ids, counts in step_rows for r, n in zip(ids, counts) for _ in range(n)] + ["a", "c"]
    kept = [i for i, r in enumerate(owners) if r in ("s", "c")]
    assert feats[:, 0].long().tolist() == kept  # s's and c's rows, in step order


@pytest.mark.parametrize("seed", range(4))
def test_the_rows_a_k0_step_keeps_are_an_incomplete_requests_rows_before_its_cut(seed):
    """``ContextQueue.kept_rows`` (per request, what a K = 0 step gathers) and ``needed`` (the
    mask over rows) against the rule written out row by row: a live request keeps every row,
    an incomplete one those at positions below its cut (none without a cut); None when every
    row is kept. Random batches of decode rows and of several rows per request."""
    from dflash_vllm.proposers.dflash import ContextQueue

    rng = np.random.default_rng(seed)
    for _ in range(200):
        q = ContextQueue(block_size=16)
        n = int(rng.integers(1, 12))
        ids = [f"r{i}" for i in range(n)]
        counts = np.ones(n, dtype=np.int32) if rng.random() < 0.5 else rng.integers(0, 5, n).astype(np.int32)
        starts = rng.integers(0, 64, n).astype(np.int32)
        for r in ids:
            if rng.random() < 0.4:
                q.incomplete.add(r)
                if rng.random() < 0.7:
                    q._cut[r] = int(rng.integers(0, 80))
        want = [p < q._cut.get(r, 0) if r in q.incomplete else True
                for r, c, s0 in zip(ids, counts.tolist(), starts.tolist()) for p in range(s0, s0 + c)]
        kept, mask = q.kept_rows(ids, counts, starts), q.needed(ids, counts, starts)
        if all(want):
            assert kept is None and mask is None
            continue
        assert mask.tolist() == want
        assert kept.tolist() == [sum(w for w, o in zip(want, np.repeat(np.arange(n), counts)) if o == i) for i in range(n)]
        if not q._cut:  # without prefix caching's cuts: an incomplete request keeps nothing
            q2 = ContextQueue()
            q2.incomplete = set(q.incomplete)
            assert q2.needed(ids, counts, None).tolist() == np.repeat([r not in q.incomplete for r in ids], counts).tolist()


@pytest.mark.parametrize("checked", [False, True], ids=["unchecked", "checked"])
def test_k0_steps_shed_context_at_the_limit_instead_of_writing_it(monkeypatch, checked):
    """A long run of K = 0 steps fills the deferred-context queue: the proposer then sheds the
    oldest requests (never drafted for again) instead of writing their context, and the plan
    leaves them out; this step's own rows are written only if they alone cannot fit. The same
    when the caller checked the step's rows (``kept_rows``, as a K = 0 step does) before the
    shed: a request shed in the same call loses this step's row too."""
    import torch

    from dflash_vllm.proposers import dflash as prop

    monkeypatch.setattr(prop, "_MAX_DEFERRED", 16)
    writes = []
    self = types.SimpleNamespace(_ctx_queue=prop.ContextQueue(), _flush_s=0.0,
                                 model=types.SimpleNamespace(write_context_kv=lambda f, p, s: writes.append(len(f))))
    write = types.MethodType(prop.DFlashProposer._write_context, self)
    self._flush_queue = types.MethodType(prop.DFlashProposer._flush_queue, self)
    v = 0

    def step(ids, counts):
        nonlocal v
        q = self._ctx_queue
        q.end(set())
        f, p, s = _rows(ids, counts, v)
        v += sum(counts)
        counts = np.array(counts)
        if checked:  # as a K = 0 step: only the rows kept_rows keeps are passed, the rest counted shed
            kept = q.kept_rows(ids, counts, None)
            if kept is not None:
                rows = torch.from_numpy(np.flatnonzero(prop._first_rows(counts, kept)))
                q.shed_rows += len(f) - len(rows)
                f, p, s, ids, counts = f[rows], p[rows], s[rows], [r for r, x in zip(ids, kept > 0) if x], kept[kept > 0]
        write(f, p, s, int(counts.sum()), defer=True, owners=(ids, counts), checked=checked)

    step(["a"], [8])  # a's prompt
    step(["a", "b"], [1, 3])  # b's
    step(["a", "b", "c"], [1, 1, 3])  # 15 rows queued
    step(["a", "b", "c"], [1, 1, 1])  # 18 > 16: shed down to 8 - 3; a, the oldest (10 rows), goes
    q = self._ctx_queue
    assert writes == [] and q.incomplete == {"a"} and q.rows == 4 + 3 + 2, (writes, q.incomplete, q.rows)
    assert q.shed_rows == 10 + 1 and q.shed_requests == 1  # a's rows, and its row of this step
    step(["a", "b", "c", "d"], [1, 1, 1, 9])  # 12 rows: more than half the limit alone, written now after the queue
    # (checked: a's row never reaches the write, kept_rows left it out, as in a K = 0 step)
    assert writes == [9, 11 if checked else 12] and q.rows == 0, writes



@pytest.mark.parametrize("held", [False, True], ids=["dense", "held"])
def test_deferred_context_leaves_the_cache_an_eager_writer_leaves_for_every_request_it_drafts_for(monkeypatch, held):
    """Random traffic (requests joining with prompts, finishing, preempted and resumed, slots
    freed and reused, seeded requests protected, drafted and K = 0 steps mixed, a small queue
    limit so that rows are shed): after the last drafter forward, every slot owned by a running
    request the queue has not marked incomplete holds what writing every step at once would
    have left there; no row of a request that ended before the write is written (dropped),
    and every row is either written, dropped or shed. ``held``: features queued per layer
    (``_Parts``, as a K = 0 step that keeps only some rows queues them)."""
    import random

    import torch

    from dflash_vllm.proposers import dflash as prop

    monkeypatch.setattr(prop, "_MAX_DEFERRED", 48)
    num_checked = 0
    for seed in range(6):
        rng = random.Random(seed)
        lazy, eager, written, stale, widths = {}, {}, [0], [0], set()
        owner_of, life = {}, {}  # value -> (request, life), request -> its life (preemptions + 1)

        def write_kv(f, p, s):
            widths.add(f.shape[1])
            assert f.shape[0] == 0 or torch.equal(f, f[:, :1].repeat(1, 4)), "every column of a row its own value"
            written[0] += len(f)
            values = f[:, 0].long().tolist()
            stale[0] += sum(life.get(owner_of[v][0]) != owner_of[v][1] for v in values)
            lazy.update(zip(s.tolist(), values))

        self = types.SimpleNamespace(_ctx_queue=prop.ContextQueue(), _flush_s=0.0,
                                     model=types.SimpleNamespace(write_context_kv=write_kv))
        write = types.MethodType(prop.DFlashProposer._write_context, self)
        self._flush_queue = types.MethodType(prop.DFlashProposer._flush_queue, self)
        q = self._ctx_queue
        free, owned, value, total = list(range(4000)), {}, 0, 0
        rng.shuffle(free)
        for step in range(300):
            finished = {r for r in owned if rng.random() < 0.06}
            preempted = {r for r in owned if r not in finished and rng.random() < 0.02}
            for r in finished | preempted:
                free.extend(owned[r])
            q.end(finished, preempted)
            for r in preempted:  # resumes at once: its whole context again, in new slots
                owned[r] = [None] * len(owned[r])
                life[r] += 1
            for r in finished:
                del owned[r], life[r]
            while len(owned) < 10 and rng.random() < 0.4:
                r = f"r{step}-{len(owned)}"
                owned[r], life[r] = [None] * rng.randint(1, 30), 0  # a prompt
            q.protected = {r for r in owned if zlib.crc32(f"{seed}{r}".encode()) % 7 == 0}  # not hash(): salted per process
            ids, counts, slots = list(owned), [], []
            for r in ids:
                new = [i for i, x in enumerate(owned[r]) if x is None] or [len(owned[r])]
                if new == [len(owned[r])]:
                    owned[r].append(None)
                for i in new:
                    owned[r][i] = free.pop()
                    slots.append(owned[r][i])
                    owner_of[value + len(slots) - 1] = (r, life[r])
                counts.append(len(new))
            n = len(slots)
            vals = torch.arange(value, value + n)
            value, total = value + n, total + n
            eager.update(zip(slots, vals.tolist()))
            features = vals[:, None].float().repeat(1, 4)
            if held:  # two feature layers, side by side once written
                features = prop._Parts((features[:, :1].clone(), features[:, 1:].clone()))
            write(features, vals.clone(), torch.tensor(slots), n, defer=step == 299 or rng.random() < 0.9,
                  owners=(ids, np.array(counts)))
        write(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 0, defer=False)
        assert widths == {4}, f"features written at the width they were queued: {widths}"
        checked = [s for r, ss in owned.items() if r not in q.incomplete for s in ss]
        wrong = [s for s in checked if lazy.get(s) != eager[s]]
        assert not wrong, f"seed {seed}: {len(wrong)} of {len(checked)} slots differ from the eager cache"
        num_checked += len(checked)
        assert stale[0] == 0, f"{stale[0]} rows written after their request ended (seed {seed})"
        assert q.rows == 0 and written[0] + q.dropped + q.shed_rows == total, (written, q.dropped, q.shed_rows, total)
        assert q.dropped and q.shed_rows and q.shed_requests, (q.dropped, q.shed_rows)
    assert num_checked > 300, num_checked  # slots of running requests the queue did not shed


def test_every_second_of_a_step_is_in_one_clock_of_the_policy_but_the_deferred_context_flush(monkeypatch):
    """The proposer's clocks, on a fake clock: from the first plan to the last, the time the
    policy is told (each step's T_v: execute_model to the plan, the gap since the previous
    drafting call, the previous step's plan and K = 0 copy; each drafting call's T_d) adds up to
    the wall time less the write of the context K = 0 steps deferred, the one cost left to the
    probes' measurement. A drafted step's T_d holds the write of the context it verified (until
    session 17 that write was in no clock: 7 % of a drafted step at batch 1 on the demo pair).
    Step 3 is planned in the policy's idle window: its clocks reach the policy with step 4's."""
    import torch

    from dflash_vllm.proposers import dflash as prop

    clock = [0.0]

    def tick(s):
        clock[0] += s

    monkeypatch.setattr(prop, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    EXEC, PLAN, COPY, PREP, FWD, SCHED, W0, W1, IDLE = 5.0, 0.2, 0.05, 1.0, 3.0, 0.5, 0.4, 0.01, 0.03
    ids = ["a", "b", "c"]
    plans = [0, 0, 0, 15, 15, 0, 15]  # q per step
    told = {"steps": [], "drafts": []}

    idle = []

    class Policy:
        idle_left = 0

        dormant = False  # drafting pays: every request keeps context

        def closes_door(self, num_reqs):
            return False

        def on_step(self, now, num_tokens, num_reqs, step_start, gap, overhead=0.0):
            told["steps"].append((now - step_start) + (gap or 0.0) + overhead)

        def idle_step(self, num_reqs, num_decode):
            tick(IDLE)
            idle.append((num_reqs, num_decode, len(told["steps"])))
            self.idle_left -= 1
            return True

        def on_draft_time(self, seconds, block_tokens, num_reqs):
            told["drafts"].append(seconds)

        def plan(self, req_ids, draftable, can_shorten=True, seeded=None, num_decode=None):
            tick(PLAN)
            q = plans[min(len(told["steps"]), len(plans)) - 1]
            self.idle_left = int(len(told["steps"]) == 2)  # step 3: in the window
            return np.full(len(req_ids), q), q

    writes = []

    def write_kv(f, p, s):
        writes.append(len(f))
        tick(W0 + W1 * len(f))

    self = object.__new__(prop.DFlashProposer)
    self.__dict__.update(
        _runner=types.SimpleNamespace(
            input_batch=types.SimpleNamespace(num_reqs=3, req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                              num_computed_tokens_cpu=np.zeros(3, dtype=np.int64)),
            discard_request_mask=types.SimpleNamespace(np=np.zeros(3)), valid_sampled_token_count_event=None,
            _get_positions=lambda n: torch.arange(n)),
        _ctx_queue=prop.ContextQueue(), policy=Policy(), model=types.SimpleNamespace(write_context_kv=write_kv),
        device=torch.device("cpu"), submitted_hist=np.zeros(16, dtype=np.int64), _record_lengths=False,
        _same_on_all_ranks=True, _skipped_step=False, _pending_k=None, _planned_q=None, _step_start=None,
        _call_end=None, _plan_start=None, _overhead=0.0, _flush_s=0.0, _draft_timing=None, _idle_clocks=[],
        num_drafter_forwards=0, num_skipped_forwards=0)
    add = self._ctx_queue.add
    self._ctx_queue.add = lambda *a, **k: (tick(COPY), add(*a, **k))

    def propose_ids(so, sampled, sm, hidden, sample_hidden, aux, spec, cad, slots):  # the runner's, calling propose()
        tick(PREP)
        n = so.total_num_scheduled_tokens
        t = self._begin_draft(torch.cat(aux, dim=-1), torch.arange(n), cad.slot_mapping, n)
        tick(FWD)
        self._end_draft(t, 3 * 16, 3)
        return [[1] * 15] * 3

    rows = [9, 3, 3, 3, 12, 3, 6]  # tokens verified per step (the first with prompts)
    first_plan = None
    for q, n in zip(plans, rows):
        self._step_start = clock[0]
        tick(EXEC)
        if first_plan is None:
            first_plan = clock[0]
        so = types.SimpleNamespace(finished_req_ids=set(), preempted_req_ids=set(), scheduled_new_reqs=[], num_spec_tokens_to_schedule=15,
                                   total_num_scheduled_tokens=n)
        cad = types.SimpleNamespace(query_start_loc_cpu=torch.tensor([0, n - 2, n - 1, n]), slot_mapping=torch.arange(n))
        self._plan_then_propose(propose_ids, so, None, types.SimpleNamespace(generators={}), None, None,
                                [torch.ones(n, 2), torch.ones(n, 2)], None, cad, None)
        tick(SCHED)
    self._step_start = clock[0]  # one more step's plan, to read the last step's clocks
    tick(EXEC)
    last_plan = clock[0]
    self._plan(3, 3, 15, types.SimpleNamespace(generators={}))
    deferred = (W0 + W1 * (9 + 3 + 3)) + (W0 + W1 * 3)  # the queue, flushed by steps 4 and 7
    assert writes == [9 + 3 + 3, 3, 12, 3, 6], writes
    assert idle == [(3, 3, 2)] and len(told["steps"]) == len(plans) + 1, (idle, told["steps"])
    assert told["steps"][3] == pytest.approx(SCHED + EXEC + IDLE + COPY), told["steps"]  # step 3's host work in step 4's
    # The plan and the K = 0 copy of step 1 are in step 2's T_v; step 4's own write is in its T_d.
    assert told["steps"][1] == pytest.approx(SCHED + EXEC + PLAN + COPY), told["steps"]
    assert told["drafts"][:2] == [pytest.approx(PREP + W0 + W1 * 3 + FWD), pytest.approx(PREP + W0 + W1 * 12 + FWD)]
    told_total = sum(told["steps"][1:]) + sum(told["drafts"])
    assert told_total == pytest.approx(last_plan - first_plan - deferred), (told_total, last_plan - first_plan, deferred)


def _after_batch_change(cover_every: int, seed: int, local: bool = True) -> tuple[int, float]:
    """Prompts the drafter knows at batch 64, then prompts it does not know at batch 1 (the
    bench's code c = 64 cell, then chat c = 1): steps drafted in the first 150 at batch 1, and
    tokens per second there."""
    p = AdaptivePolicy(15)
    p.COVER_EVERY = cover_every
    p.cost.LOCAL_WITHIN = CostModel.LOCAL_WITHIN if local else 0
    _simulate_hist(p, DEMO_HIST["tasks"], 64, *DEMO_COST[64], steps=300, seed=seed)
    drafted = []
    plan = p.plan
    p.plan = lambda *a, **kw: (lambda kq: (drafted.append(kq[1] > 0), kq)[1])(plan(*a, **kw))
    tok_s = _simulate_hist(p, DEMO_HIST["chat"], 1, *DEMO_COST[1], steps=150, seed=seed, warm=0, life=20)
    return sum(drafted), tok_s


def test_a_plain_step_is_measured_soon_after_the_batch_moves_far():
    """After drafting at batch 64 the plain-step line is an extrapolation at batch 1 (priced
    there at 4.5x what the step costs in this simulation; 5-9 ms against 4.5 on the demo pair).
    With the local price (CostModel._local) and plain anchors every COVER_EVERY steps until two
    are measured near the new batch, drafting on prompts the drafter does not know stops sooner
    (3 seeds: 46 drafted steps of 150 against 69, 0.79 of no drafts against 0.71). The local
    price carries most of it (taken out, this test fails: 66 steps, 0.73); the anchors alone
    add ~2 % here (without them: 49 steps, 0.77). Since session 22 the acceptance curve follows
    the change within a few steps (AcceptanceModel's shift detection), and both read far better:
    10 drafted steps against 16, 0.942 of no drafts against 0.913."""
    seeds = (0, 1, 2)
    cover = [_after_batch_change(AdaptivePolicy.COVER_EVERY, s) for s in seeds]
    never = [_after_batch_change(10**9, s, local=False) for s in seeds]
    none = np.mean([_simulate_hist(AdaptivePolicy(15, fixed=[0]), DEMO_HIST["chat"], 1, *DEMO_COST[1], steps=150,
                                   seed=s, warm=0, life=20) for s in seeds])
    d_cover, d_never = np.mean([d for d, _ in cover]), np.mean([d for d, _ in never])
    g_cover, g_never = np.mean([g for _, g in cover]), np.mean([g for _, g in never])
    print(f"drafted steps of 150 at batch 1: {d_cover:.0f} (without: {d_never:.0f}); tok/s over no drafts "
          f"{g_cover / none:.3f} (without: {g_never / none:.3f})")
    assert d_cover < 0.75 * d_never and g_cover > 1.02 * g_never and g_cover > 0.92 * none


def test_plain_step_price_follows_the_first_plain_steps_at_a_new_batch():
    """The plain-step line, fitted to hundreds of plain steps at batch 64, extrapolates badly to
    batch 1 (its slope is held by the ridge); two plain steps measured there set the price there."""
    cm = CostModel()
    true = lambda n: 0.0105 + 4e-4 * n if n < 8 else 0.03 + 3e-4 * n  # noqa: E731  (DEMO_COST at 1 and 64)
    for _ in range(300):
        cm.observe_step(true(64), 64)
    far = float(cm.t_verify(1))
    for _ in range(2):
        cm.observe_step(true(1), 1)
    near = float(cm.t_verify(1))
    print(f"plain step at batch 1 priced {1e3 * far:.1f} ms after batch 64, {1e3 * near:.1f} ms after 2 there (true {1e3 * true(1):.1f})")
    assert far > 2 * true(1) and near == pytest.approx(true(1), rel=0.1)
    assert float(cm.t_verify(64)) == pytest.approx(true(64), rel=0.1)  # the far batch keeps its price
    arr = cm.t_verify(np.array([1.0, 64.0]))
    assert arr[0] == pytest.approx(near) and arr[1] == pytest.approx(float(cm.t_verify(64)))


def test_a_drafted_step_is_never_priced_below_the_plain_step_it_extends():
    """The plain step's price at N0 carries the error of the line at the plain steps measured
    near N0 (CostModel._local); a drafted plan's price at N0 + sum k came from the lines alone
    (another batch bucket). When the latest plain steps ran slow, drafted plans undercut the
    plain step they contain, and the policy drafted on prompts its drafter does not know (in the
    engine: batch 1-28, g(1) 0.1-0.35, plain 9.8-25 ms against drafted 8.4-15 ms)."""
    p = AdaptivePolicy(15)
    cm = p.cost
    ids = [f"r{i}" for i in range(16)]
    rng = np.random.default_rng(0)
    for s in range(300):  # batch 16: plain steps 12 ms; one draft each now and then, a fifth accepted
        if s % 4 == 0:
            cm.observe_step(0.014, 32, drafts=16)
            cm.observe_draft(0.008, 32, 16)
            p.acceptance.observe(ids, np.ones(16, dtype=int), (rng.random(16) < 0.2).astype(int))
        else:
            cm.observe_step(0.012, 16)
    for _ in range(2):
        cm.observe_step(0.025, 16)  # the latest plain steps ran slower
    t0 = float(cm.t_verify(16))
    assert float(cm.t_verify(16, 16)) >= t0 + cm.delta()  # a drafted step extends the plain one
    opt = p._optimum(ids, 16)
    assert opt.g <= opt.g0, f"drafts {opt.k.tolist()} at g(1) = {p.acceptance.rates()[0]:.2f}"
    assert opt.probe_loss > 0  # a probe loses what the drafts do not bring back


def test_drafts_are_priced_apart_from_decoding_requests():
    """A decoding request costs more than a draft (scheduling, sampling, output handling besides
    its token): on the demo pair on CPU ~0.2 ms per request against ~0.06 per draft at batch 64.
    Priced with one slope in all verified tokens, and floored at the plain line there, 960 drafts
    at batch 64 cost what 960 more requests would (~200 ms against ~75), and 15 drafts at batch
    1 a plain step of 16: the policy drafted too little at every batch once plain steps had been
    seen over a range of batches. Here the true costs are known; the model must find both."""
    cm = CostModel()
    rng = np.random.default_rng(0)

    def true(r, d):  # seconds: plain step of r requests, plus a drafted step's fixed cost and drafts
        return 0.0045 + 2e-4 * r + (0.001 + 6e-5 * d if d else 0.0)

    for s in range(1500):
        r = int(rng.choice([1, 2, 4, 8, 16, 32, 64]))
        d = 0 if s % 3 == 0 else int(r * rng.choice([1, 3, 7, 15]))
        cm.observe_step(true(r, d) * (1 + 0.02 * rng.standard_normal()), r + d, drafts=d)
    for r, d in ((64, 960), (64, 192), (1, 15), (8, 56)):
        assert float(cm.t_verify(r, d)) == pytest.approx(true(r, d), rel=0.15), (r, d)
    assert cm.slope_verify(64 + 960) == pytest.approx(6e-5, rel=0.3)
    assert float(cm.t_verify(64)) == pytest.approx(true(64, 0), rel=0.1)


@pytest.mark.parametrize("alpha", [0.85, 0.6])
def test_matches_the_best_fixed_k_through_a_sequence_of_batch_sizes(alpha):
    """One policy through batches 1, 8, 64, 16 (a server whose load moves), each phase against
    every fixed K run through the same sequence. A decoding request costs 0.2 ms, a draft 0.06:
    with one slope for both, plain steps seen at several batches priced drafts as requests, and
    at batch 64 the policy drafted 1 deep where 3 paid (0.85 of the best fixed K; at rate 0.6,
    0.88-0.89 at batch 1 and 16)."""
    def tv(n, r):
        return 0.0045 + 2e-4 * r + ((0.001 + 6e-5 * (n - r)) if n > r else 0.0)

    def td(d):
        return 0.002 + 2e-5 * d

    batches = (1, 8, 64, 16)

    def run(policy):
        return [_simulate(policy, np.full(r, alpha), tv, td, steps=400) for r in batches]

    fixed = {k: run(AdaptivePolicy(15, fixed=[k])) for k in (0, 1, 3, 7, 15)}
    ours = run(AdaptivePolicy(15))
    for i, r in enumerate(batches):
        best = max(fixed, key=lambda k: fixed[k][i])
        assert ours[i] >= 0.95 * fixed[best][i], f"batch {r}: {ours[i]:.0f} < 0.95 x K={best} {fixed[best][i]:.0f}"
        assert ours[i] >= 0.97 * fixed[0][i]


def test_a_burst_of_prompts_does_not_price_the_steps_after_it():
    """The next step's prompt tokens are expected from the last steps' (N0 includes them). After a
    burst (a cell's 64 prompts at once, ~3,000-6,000 tokens, then none) the estimate priced the
    plain steps after it at 100-380 ms in the engine, against ~25 (the plain-step line's slope is
    per decoding request), drafting at batch 64 looked cheap next to that, and the policy drafted
    on prompts its drafter does not know (g(1) 0.07-0.26; here: 166-283 ms against 21). A steady
    stream of prompts is still expected at its level."""
    p = AdaptivePolicy(15)
    decode = lambda b: 0.005 + 2.5e-4 * b  # noqa: E731  (a plain decode step at batch b: 21 ms at 64)
    rng = np.random.default_rng(0)
    for _ in range(400):  # plain decode steps at batches 1-64 (the plain-step line's slope is per request)
        b = int(rng.integers(1, 65))
        p.cost.observe_step(decode(b), b)
    t, priced = 0.0, []
    for step in range(6):
        n = 64 + 3200 if step < 2 else 64  # the burst, in two chunks, then decode steps only
        dt = decode(64) + (0.15 if n > 64 else 0.0)
        p.on_step(t + dt, n, 64, t)
        t += dt
        priced.append(float(p.cost.t_verify(64 + p.prefill_tokens)))  # the next plain step, as planned
    assert max(priced[2:]) < 1.5 * decode(64), [round(1e3 * x, 1) for x in priced]
    for _ in range(40):  # a steady stream: 300 prompt tokens every step
        p.on_step(t + decode(64), 364, 64, t)
        t += decode(64)
    assert p.prefill_tokens == pytest.approx(300, rel=0.05)


def test_one_slow_plain_step_does_not_set_the_plain_price():
    """The plain price near a batch follows the recent plain steps there (CostModel._local). One
    step of 45 ms where plain steps cost 10 (a GC pause, the VM; 26-45 ms at batch 1-8 in the
    engine) made it ~27 ms until the next plain step at that batch, which while drafting comes
    every 8-32 steps, and drafting was weighed against that. A real rise is still followed."""
    cm = CostModel()
    for _ in range(50):
        cm.observe_step(0.010, 5)
    cm.observe_step(0.045, 5)
    assert float(cm.t_verify(5)) < 0.016, float(cm.t_verify(5))
    for _ in range(4):  # the steps really got slower
        cm.observe_step(0.025, 5)
    assert float(cm.t_verify(5)) > 0.020, float(cm.t_verify(5))


def test_with_prefix_caching_at_the_limit_only_generated_rows_are_shed_and_their_blocks_ledgered():
    """With prefix caching, a full queue sheds generated rows only (from the block holding the
    prompt's tail on), of ended requests first: prompt blocks are written, the shed blocks are
    unwritten, a request whose prefix hit covers one is never drafted for (incomplete from its
    start), one that hits only prompt blocks is, and a block allocated anew leaves the ledger."""
    from dflash_vllm.proposers.dflash import ContextQueue

    q = ContextQueue(block_size=4)
    q.ledger = True
    ns = types.SimpleNamespace

    def sched(new=(), cached=()):  # new: (rid, prompt_len, blocks, hit); cached: (rid, new blocks)
        q.schedule([ns(req_id=r, prompt_token_ids=[0] * n, block_ids=(b,), num_computed_tokens=h) for r, n, b, h in new],
                   ns(req_ids=[r for r, _ in cached], resumed_req_ids=set(), new_block_ids=[(b,) if b else None for _, b in cached],
                      num_computed_tokens=[0] * len(cached)))

    def step(batch, ended=()):  # (rid, rows, first position)
        q.end(set(ended))
        ids, counts, starts = [r for r, _, _ in batch], np.array([n for _, n, _ in batch]), np.array([s for _, _, s in batch])
        pos = torch.tensor([s + j for _, n, s in batch for j in range(n)])
        q.add(pos[:, None].float(), pos, pos, ids, counts, starts)

    import torch

    q.end(set())
    sched(new=[("a", 6, [10, 11], 0), ("b", 5, [20, 21], 0)])
    step([("a", 6, 0), ("b", 5, 0)])
    for t in range(3):  # a: positions 6-8, b: 5-7 (a's third block at position 8)
        q.end(set())
        sched(cached=[("a", [12] if t == 2 else None), ("b", None)])
        step([("a", 1, 6 + t), ("b", 1, 5 + t)])
    q.end({"b"})  # b ended: its rows in full blocks stay queued (a later request may hit them)
    q.prune()
    assert q.rows == 9 + 8 and not q.incomplete
    q.shed(11)  # b's generated rows (4-7) go first, then a's (4-8): a is incomplete
    assert q.incomplete == {"a"} and q.rows == 4 + 4, (q.incomplete, q.rows)
    assert q.unwritten == {11, 12, 21}, q.unwritten  # never 10 or 20: prompt blocks
    feats, pos, slot = q.take()
    assert pos.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]  # a's and b's first blocks, all prompt
    q.end(set())
    sched(cached=[("a", [13])])  # a, still running, goes on in a new block: unwritten too
    assert 13 in q.unwritten
    q.end(set())
    sched(new=[("c", 9, [10, 30, 31], 4),  # hits a's prompt block only: drafted for
               ("d", 12, [20, 21, 32], 8),  # the next turn after b: hits b's shed block
               ("e", 3, [11], 0)])  # gets block 11 anew (evicted): its rows will be written
    assert q.incomplete == {"a", "d"} and q.hit_unwritten == 1
    assert q.unwritten == {12, 13, 21, 32}, q.unwritten  # d's own block too; 11 left
    step([("c", 5, 4), ("d", 4, 8), ("e", 3, 0)])
    assert q.rows == 5 + 3 and q.shed_rows == 5 + 4 + 4  # a's and b's generated rows; d's never queued


@pytest.mark.parametrize("closing", [False, True], ids=["open", "closing"])
@pytest.mark.parametrize("held", [False, True], ids=["dense", "held"])
def test_with_prefix_caching_no_request_drafted_for_reads_context_the_queue_shed(monkeypatch, held, closing):
    """Random traffic through a small prefix cache (block size 4): requests share system prompts,
    half the new ones are the next turn of a finished chat (their prompt is its prompt and reply
    and more), blocks are hit, freed, evicted and allocated anew, requests are preempted and
    resume, most steps are K = 0 steps and a small queue limit sheds. At every drafting step,
    every request the queue has not marked incomplete reads, at every position of its context,
    what writing every row at once would have left there (the context of its own tokens); no
    request that hit only shared prompt blocks is ever marked incomplete; rows are shed.
    ``closing``: on half the steps most new requests are closed at the door (``close_door``, as
    while drafting does not pay), and requests drafted for read blocks that closed ones computed."""
    import random

    import torch

    from dflash_vllm.proposers import dflash as prop

    monkeypatch.setattr(prop, "_MAX_DEFERRED", 64)
    bs, ns = 4, types.SimpleNamespace
    totals = {"checked": 0, "hit_unwritten": 0, "shed": 0, "hits": 0, "closed": 0, "read_closed": 0}
    for seed in range(10):  # seed 8: a request preempted and resumed twice, shed in between
        rng = random.Random(seed)
        lazy = {}
        q = prop.ContextQueue(block_size=bs)
        q.ledger = True
        self = ns(_ctx_queue=q, _flush_s=0.0,
                  model=ns(write_context_kv=lambda f, p, s: lazy.update(zip(s.tolist(), f[:, 0].long().tolist()))))
        write = types.MethodType(prop.DFlashProposer._write_context, self)
        self._flush_queue = types.MethodType(prop.DFlashProposer._flush_queue, self)
        free, cache, key_of, refs = list(range(120)), {}, {}, {}
        systems = [[rng.randrange(1000) for _ in range(rng.randint(5, 13))] for _ in range(3)]
        reqs, paused, chats, n = {}, [], [], 0
        maker, closed = {}, set()  # block id -> the request that computed it; requests closed at the door

        def value(toks, p):  # a row's context: a function of the tokens up to it
            return hash(tuple(toks[: p + 1])) % (1 << 22)

        def alloc():
            b = free.pop(0)
            if b in key_of:  # evicted from the prefix cache
                del cache[key_of.pop(b)]
            refs[b] = 1
            return b

        def release(r):
            for b in reqs[r]["blocks"]:
                refs[b] -= 1
                if not refs[b]:
                    free.append(b)

        def start(r, toks, prompt_len):
            blocks, hit = [], 0
            while (hit + 1) * bs <= len(toks) - 1 and tuple(toks[: (hit + 1) * bs]) in cache:
                b = cache[tuple(toks[: (hit + 1) * bs])]
                if not refs.get(b):
                    free.remove(b)
                refs[b] = refs.get(b, 0) + 1
                blocks.append(b)
                hit += 1
            need = -(-len(toks) // bs) - len(blocks)
            if need > len(free):
                for b in blocks:
                    refs[b] -= 1
                    if not refs[b]:
                        free.append(b)
                return None
            blocks += [alloc() for _ in range(need)]
            maker.update((b, r) for b in blocks[hit:])
            reqs[r] = {"toks": toks, "blocks": blocks, "prompt": prompt_len, "from": hit * bs}
            totals["hits"] += hit > 0
            return blocks, hit * bs

        for step in range(400):
            finished = {r for r in reqs if rng.random() < 0.05}
            preempted = {r for r in reqs if r not in finished and rng.random() < 0.01}
            for r in finished | preempted:
                release(r)
                if r in finished:
                    chats.append(reqs[r]["toks"])
                else:
                    paused.append((r, reqs[r]["toks"], reqs[r]["prompt"]))
                del reqs[r]
            q.end(finished, preempted)
            new, resumed, from_system = [], [], set()
            for r, toks, pl in paused[:]:  # from the step after its preemption on, as vLLM's scheduler
                if r in preempted:
                    continue
                got = start(r, toks, pl)
                if got is not None:
                    paused.remove((r, toks, pl))
                    resumed.append((r, got))
            while len(reqs) < 8 and rng.random() < 0.5:
                n += 1
                r = f"r{n}"
                if chats and rng.random() < 0.5:  # the next turn of a finished chat
                    toks = chats.pop(rng.randrange(len(chats))) + [rng.randrange(1000) for _ in range(rng.randint(1, 6))]
                else:
                    toks = systems[rng.randrange(3)] + [rng.randrange(1000) for _ in range(rng.randint(1, 8))]
                    from_system.add(r)
                got = start(r, toks, len(toks))
                if got is None:
                    break
                new.append(ns(req_id=r, prompt_token_ids=list(toks), block_ids=(list(got[0]),), num_computed_tokens=got[1]))
            ids, counts, starts, rows = [], [], [], []
            cached_ids, cached_blocks = [], []
            for r, st in reqs.items():
                fresh = any(x.req_id == r for x in new) or any(x == r for x, _ in resumed)
                if fresh:
                    p0 = st["from"]
                else:  # one decode token, in a new block when it starts one
                    st["toks"].append(rng.randrange(1000))
                    p0 = len(st["toks"]) - 1
                    nb = None
                    if p0 // bs == len(st["blocks"]):
                        if not free:
                            st["toks"].pop()
                            continue
                        nb = [alloc()]
                        maker[nb[0]] = r
                        st["blocks"] += nb
                    cached_ids.append(r)
                    cached_blocks.append((nb,) if nb else None)
                ids.append(r)
                counts.append(len(st["toks"]) - p0)
                starts.append(p0)
                rows += [(st["blocks"][p // bs] * bs + p % bs, value(st["toks"], p)) for p in range(p0, len(st["toks"]))]
            res_ids = [r for r, _ in resumed]
            q.schedule(new, ns(req_ids=res_ids + cached_ids, resumed_req_ids=set(res_ids),
                               new_block_ids=[(g[0],) for _, g in resumed] + cached_blocks,
                               num_computed_tokens=[g[1] for _, g in resumed] + [0] * len(cached_ids)), 0)
            assert not (from_system & q.incomplete), "a request that hit only shared prompt blocks"
            if closing and new and rng.random() < 0.5:  # as DFlashProposer._close_door, after the schedule
                shut = [x.req_id for x in new if rng.random() < 0.7]
                totals["closed"] += q.close_door(shut)
                closed.update(shut)
            drafted = rng.random() < 0.08
            slots = torch.tensor([s for s, _ in rows], dtype=torch.long)
            vals = torch.tensor([v for _, v in rows], dtype=torch.float64)
            features = vals[:, None].repeat(1, 2)
            if held:
                features = prop._Parts((features[:, :1].clone(), features[:, 1:].clone()))
            write(features, slots.clone(), slots, len(rows), defer=not drafted,
                  owners=(ids, np.array(counts, dtype=np.int64), np.array(starts, dtype=np.int64)))
            for r, st in reqs.items():  # full blocks enter the prefix cache
                for i in range(len(st["toks"]) // bs):
                    k = tuple(st["toks"][: (i + 1) * bs])
                    if k not in cache and st["blocks"][i] not in key_of:
                        cache[k], key_of[st["blocks"][i]] = st["blocks"][i], k
            if drafted:
                for r, st in reqs.items():
                    if r in q.incomplete:
                        continue
                    toks, blocks = st["toks"], st["blocks"]
                    wrong = [p for p in range(len(toks)) if lazy.get(blocks[p // bs] * bs + p % bs) != value(toks, p)]
                    assert not wrong, f"seed {seed} step {step}: {r} reads wrong context at {wrong[:8]} of {len(toks)}"
                    totals["checked"] += len(toks)
                    totals["read_closed"] += sum(maker.get(blocks[p // bs]) in closed for p in range(len(toks)))
        totals["hit_unwritten"] += q.hit_unwritten
        totals["shed"] += q.shed_rows
    assert totals["checked"] > 2000 and totals["hits"] > 50, totals
    assert totals["hit_unwritten"] > 0 and totals["shed"] > 0, totals
    assert (totals["closed"] > 200 and totals["read_closed"] > 1000) if closing else not totals["closed"], totals


def test_a_queue_of_held_and_concatenated_steps_takes_every_row_side_by_side():
    """A K = 0 step queues its features concatenated (``_queued_features``), or per layer (``_Parts``) when
    it keeps only some rows: one queue can hold both, and ``take`` must lay every step's rows
    out alike (layer by layer, in step order)."""
    import torch

    from dflash_vllm.proposers import dflash as prop

    v = torch.arange(6, dtype=torch.float32)[:, None]
    pos = torch.arange(6)
    for order in ((True, False, True), (False, True, False)):
        q = prop.ContextQueue()
        for i, held in enumerate(order):
            layers = (v + 10 * i, 100 + 10 * i + v.repeat(1, 2))
            feats = prop._Parts(layers) if held else torch.cat(layers, dim=-1)
            q.end()
            q.add(feats, pos + 10 * i, pos + 10 * i, ["r%d" % i], np.array([6]))
        feats, p, _ = q.take()
        assert feats.shape == (18, 3)
        assert feats[:, 0].tolist() == p.tolist() == [float(x) for x in list(range(6)) + list(range(10, 16)) + list(range(20, 26))]
        assert torch.equal(feats[:, 1:], 100 + feats[:, :1].repeat(1, 2))


def test_queued_features_are_copied_once_at_take_and_an_entry_holds_at_most_twice_its_live_rows():
    """A K = 0 step's features queued per layer (``_Parts``): rows dropped from a step are only
    forgotten while at least half of them are live (no copy), copied out once they are fewer,
    and ``take`` copies the live rows of every step once, side by side, in step order."""
    import torch

    from dflash_vllm.proposers import dflash as prop

    q = prop.ContextQueue()
    v = torch.arange(10, dtype=torch.float32)[:, None]
    parts = prop._Parts((v.clone(), 100 + v.repeat(1, 2)))
    pos = torch.arange(10)
    q.end()
    q.add(parts, pos.clone(), pos.clone(), ["a", "b", "c", "d"], np.array([3, 4, 2, 1]))  # a 0-2, b 3-6, c 7-8, d 9
    for ended, live in (("c", 8), ("a", 5)):
        q.end({ended})
        q.prune()
        (e,) = q.entries
        assert e[1] is parts and q.rows == live  # at least half live: held, nothing copied
    q.end({"d"})
    q.prune()
    (e,) = q.entries
    assert e[1] is not parts and e[1][0].shape[0] == 4 == q.rows and q.dropped == 6  # 4 of 10: copied out
    q.end()
    q.add(prop._Parts((v[:2] + 50, 150 + v[:2].repeat(1, 2))), pos[:2] + 50, pos[:2] + 50, ["e"], np.array([2]))
    feats, p, s = q.take()
    assert feats.shape == (6, 3) and q.rows == 0
    assert feats[:, 0].tolist() == [3, 4, 5, 6, 50, 51] and p.tolist() == s.tolist() == [3, 4, 5, 6, 50, 51]
    assert torch.equal(feats[:, 1:], 100 + feats[:, :1].repeat(1, 2))
    # held rows (not compacted) are gathered through their indices
    q.end()
    q.add(prop._Parts((v.clone(), 100 + v.repeat(1, 2))), pos.clone(), pos.clone(), ["x", "y"], np.array([4, 6]))
    q.end({"x"})
    feats, p, s = q.take()
    assert feats[:, 0].tolist() == p.tolist() == list(range(4, 10)) and torch.equal(feats[:, 1:], 100 + feats[:, :1].repeat(1, 2))


def test_context_queue_bench_runs_the_proposers_deferral_to_its_limit():
    """``dflash-vllm bench context-queue`` drives the proposer's own K = 0 deferral: enough
    one-request steps reach the queue's limit, where it prunes, sheds (prefix caching) and,
    when prompt rows alone fill it, writes."""
    from dflash_vllm.bench.context_queue import QueueBenchConfig, run

    out = run(QueueBenchConfig(requests=60))
    assert out["steps"] == 60 * 65
    assert out["prune"]["events"] >= 1 and out["shed"]["events"] >= 1, out
    off = run(QueueBenchConfig(requests=60, block_size=0))
    assert off["prune"]["events"] >= 1 and off["shed"]["events"] == 0, off  # ended requests free it


def test_a_k0_step_queues_a_copy_never_the_targets_own_tensors():
    """Queued K = 0 features must not keep the target's activations alive (session 27: held by
    reference, the target's forward read 1.02-1.05x no speculation's, copied 1.00-1.01x)."""
    import torch

    from dflash_vllm.proposers import dflash as prop

    aux = [torch.randn(8, 4), torch.randn(8, 4)]
    feats = prop._queued_features(aux, 5)
    assert torch.equal(feats, torch.cat([a[:5] for a in aux], dim=-1))
    own = {a.untyped_storage().data_ptr() for a in aux}
    parts = feats if isinstance(feats, prop._Parts) else (feats,)
    assert not own & {p.untyped_storage().data_ptr() for p in parts}


def test_requests_closed_at_the_door_keep_no_context_and_prompt_blocks_stay_written():
    """While drafting does not pay, a request arriving beyond the sentinels gets no drafter
    context: incomplete from its start (never a protected one), none of its rows queued, complete
    again once it ends. With prefix caching, rows of its prompt's full blocks are still queued
    (a later request may hit them) and its blocks from there on are ledgered unwritten."""
    from dflash_vllm.proposers.dflash import ContextQueue

    q = ContextQueue()
    q.protected = {"s"}
    q.end(set())
    assert q.close_door(["a", "s", "b"]) == 2 and q.incomplete == {"a", "b"} and q.closed_requests == 2
    q.add(*_rows(["a", "s", "c", "b"], [3, 2, 4, 1], 0), ["a", "s", "c", "b"], np.array([3, 2, 4, 1]))
    assert q.rows == 6 and q.shed_rows == 4
    q.end({"a"})
    assert q.incomplete == {"b"}
    feats, _, _ = q.take()
    assert feats[:, 0].long().tolist() == [3, 4, 5, 6, 7, 8]  # s's and c's rows only

    import torch

    q = ContextQueue(block_size=4)
    assert q.close_door(["a"]) == 0 and not q.incomplete  # no ledger: nothing may go unwritten
    q.ledger = True
    ns = types.SimpleNamespace
    q.end(set())
    q.schedule([ns(req_id="a", prompt_token_ids=[0] * 6, block_ids=([10, 11],), num_computed_tokens=0)], None)
    assert q.close_door(["a"]) == 1 and q.incomplete == {"a"} and q.unwritten == {11}
    pos = torch.arange(6)
    q.add(pos[:, None].float(), pos, pos, ["a"], np.array([6]), np.array([0]))
    _, queued, _ = q.take()
    assert queued.tolist() == [0, 1, 2, 3]  # the prompt's full block: written


def test_a_drain_and_the_next_arrivals_are_no_change_of_load():
    """The "batch 4x from the last probe's" rule reads the batch as its level (a running
    geometric mean over ~20 steps): a benchmark cell's drain (16 requests ending within a few
    steps) and the next cell's arrivals pass through batches 4x from the last probe's, and with
    the instantaneous batch the rule brought a probe after 32 steps in nearly every weak cell
    (11 of 36 drafted steps over chat and free at c = 1..64 in one engine, session 29's scratch
    probewhy.py). A load that stays 4x away still brings one after ``probe_every`` steps."""
    # dormant, the last probe at batch 16, and no probe due on its own during the drain
    p = _dormant_policy(16, 0.75, 600, lambda p: p.steps_since_draft > 0 and p._probe_bucket == 4
                        and p.steps_since_draft + 6 + 1 < p.probe_every)

    def run(batch, steps):
        for _ in range(steps):
            p.plan([f"d{i}" for i in range(batch)], np.ones(batch, dtype=bool))

    run(2, 6)  # a drain: 8x below the last probe's batch, for a few steps
    assert abs(CostModel._bucket(2) - p._probe_bucket) >= 2  # the batch itself would call the rule
    assert abs(p._level_bucket(2) - p._probe_bucket) < 2
    run(16, 20)  # the next cell
    probes = p._probes
    run(1, 60)  # a load that stays 16x smaller: a probe within probe_every steps of the level's move
    assert p._probes > probes and p._probe_bucket <= 1


def test_a_load_that_rises_4x_waits_for_the_budgeted_probe_spacing():
    """The level rule looks down only (``AdaptivePolicy._level_moved``): a batch level 4x below
    the last probe's gets a probe after ``probe_every`` steps, one 4x above waits for the spacing
    the measured probe losses give at the budget. At a larger batch the same acceptance pays less
    and a probe costs more; both ways, the rule brought a probe into every short benchmark cell
    after a 4x rise of the load (free c = 16: one probe, ~3.5 plain steps, in a 48-step cell;
    session 37's weak cells over 8 repeats, adaptive 0.93 of K = 0 there). Dormant at batch 64
    (its probes measured), then at batch 8 (the last probe there), then back at 64: no probe
    within 40 steps, one at the budgeted spacing; with the rule both ways, one after ~15."""
    p = AdaptivePolicy(15)
    rng = np.random.default_rng(0)
    tv, td = DEMO_COST[64]

    def loop(r, steps):
        # the engine's costs no clock of the policy sees (_hidden): what makes a probe cost a few plain steps
        _closed_loop(p, r, lambda g, k: np.minimum(rng.geometric(0.9, r) - 1, k), lambda n, _r: tv(n),
                     td, steps=steps, warm=0, hidden_draft=tv(64), transient=0.5 * tv(64))

    loop(64, 800)
    assert p.steps_since_draft > 0 and p.probe_loss.get(CostModel._bucket(64), 0) > 1.5  # measured: spacing > 75 steps
    loop(8, 800)
    for _ in range(400):  # on to just after a probe at batch 8 (the spacing at 64 is then all ahead)
        if 0 < p.steps_since_draft <= 4:
            break
        loop(8, 2)
    assert 0 < p.steps_since_draft <= 4 and p._probe_bucket <= 4  # the last probe after the level fell 4x
    probes, spacing = p._probes, p._probe_spacing(None, 64)  # the budgeted spacing there: ~110 steps
    assert spacing > p.steps_since_draft + 40
    loop(64, 40)  # the level reaches 4x above the last probe's in ~15 steps
    assert p._level_bucket(64) - p._probe_bucket >= 2 and p._probes == probes
    loop(64, max(60, spacing + 10 - p.steps_since_draft))  # the budgeted spacing still brings one
    assert p._probes > probes
    probes = p._probes
    loop(2, 100)  # and a load 8x below the last probe's gets its look within probe_every steps of the move
    assert p._probes > probes


def test_requests_closed_at_the_door_count_in_the_goodput():
    """At batch 64 on prompts the drafter does not know, most requests arrive closed at the door
    (the proposer's ``_close_door``) and 4 may draft. Each of the 60 others emits its token per
    step whatever the plan: left out of the goodput, the 4 rows' accepted drafts looked like a
    batch's worth of tokens, and the policy drafted for them (session 33, simulation with the
    door: the weak cells' second chat c = 64 cell drafted on 9 of 50 steps, 22 with the drafting
    call priced in its batch). Counted, it drafts about as often as its probes do, and serves as
    no speculation does."""
    tv, td = DEMO_COST[64]
    rates = []
    for seed in (0, 1, 2):
        p = AdaptivePolicy(15)
        _simulate_hist(p, DEMO_HIST["chat"], 1, *DEMO_COST[1], steps=600, seed=seed, life=20, **_hidden(1))
        plan, drafted, probes = p.plan, [], p._probes

        def counted(*a, **kw):
            k, q = plan(*a, **kw)
            drafted.append(q > 0)
            return k, q

        p.plan = counted
        ours = _simulate_hist(p, DEMO_HIST["chat"], 64, tv, td, steps=300, seed=seed, warm=0, life=4, **_hidden(64))
        none = _simulate_hist(AdaptivePolicy(15, fixed=[0]), DEMO_HIST["chat"], 64, tv, td, steps=300, seed=seed,
                              warm=0, life=4, **_hidden(64))
        rates.append((np.mean(drafted), ours / none, p._probes - probes))
    print("chat at batch 64 behind the door: (drafted steps, adaptive / K = 0, probes) per seed "
          + ", ".join(f"({d:.2f}, {x:.3f}, {n})" for d, x, n in rates))
    assert max(d for d, _, _ in rates) <= 0.08 and np.mean([x for _, x, _ in rates]) >= 0.97


def _dormant_at_batch_64():
    """A policy dormant at batch 64 on prompts the drafter does not know (first drafts accepted
    ~1 in 5), with the engine's hidden costs, short requests and the door (all but 4 arrive
    closed)."""
    p = AdaptivePolicy(15)
    rng = np.random.default_rng(0)
    tv, td = DEMO_COST[64]
    _closed_loop(p, 64, lambda g, k: np.minimum(rng.geometric(0.8, 64) - 1, k), lambda n, _r: tv(n), td,
                 steps=800, warm=0, hidden_draft=tv(64), transient=0.5 * tv(64), sentinels=4, life=4)
    return p


def _record_plans(p, what):
    """Wrap ``p.plan``: each plan's ``what(k, q)`` goes into the returned list (None: left out)."""
    seen, plan = [], p.plan

    def recording(ids, is_decode, **kw):
        k, q = plan(ids, is_decode, **kw)
        x = what(k, q)
        if x is not None:
            seen.append(x)
        return k, q

    p.plan = recording
    return seen


def test_a_probe_of_a_large_batch_drafts_for_a_sample_of_its_requests():
    """Dormant at batch 64 with every request holding drafter context (the door was open when
    they arrived: tasks c = 64 after c = 32, where the policy drafted): a probe drafts for
    ``PROBE_ROWS`` requests, those verified longest ago (never verified first), so successive
    probes go round the batch. A probe of all 64 blocks cost ~2.5 plain steps in the engine
    (dormant adaptive ~7 % below K = 0 at tasks c = 64, session 38's full check); the sample
    answers what a probe asks (did the traffic change?) for a fraction of that."""
    p = AdaptivePolicy(15)
    probes = _record_plans(p, lambda k, q: np.flatnonzero(k) if q and p.dormant else None)
    rng = np.random.default_rng(0)
    tv, td = DEMO_COST[64]
    _closed_loop(p, 64, lambda g, k: np.minimum(rng.geometric(0.8, 64) - 1, k), lambda n, _r: tv(n), td,
                 steps=1500, warm=0, hidden_draft=tv(64), transient=0.5 * tv(64))
    assert p.dormant and len(probes) >= 3
    assert all(len(rows) == p.PROBE_ROWS for rows in probes)
    assert len(set(probes[1].tolist()) & set(probes[2].tolist())) == 0  # round the batch, not the same 8
    small = AdaptivePolicy(15)  # a batch of up to PROBE_ROWS: every request
    assert small._probe_rows([f"r{i}" for i in range(small.PROBE_ROWS)]).tolist() == list(range(small.PROBE_ROWS))


def test_a_load_that_falls_4x_gets_its_probe_within_a_few_steps():
    """The bench's tasks c = 1 cell after free c = 64 (dormant there): the level rule
    (``_level_moved``) brought the probe after ``probe_every`` (32) steps without drafts, ~20-30
    plain steps of a ~70-step cell that K = 15 drafts through (tasks c = 1 read 0.84-0.88 of
    K = 15 in session 38's full checks). A probe at batch 1 costs about one plain step, and it
    comes once per move of the load: now after ``LEVEL_PROBE_AFTER`` (8) steps, once the level
    (a running mean over ~20 steps) has moved, ~6 steps after a fall from 64 to 1."""
    p = _dormant_at_batch_64()
    assert p.dormant
    drafted = _record_plans(p, lambda k, q: q > 0)
    tv1, td1 = DEMO_COST[1]
    _simulate_hist(p, DEMO_HIST["tasks"], 1, tv1, td1, steps=40, warm=0, life=20, **_hidden(1))
    assert any(drafted) and drafted.index(True) <= 12, drafted


def test_a_fall_of_the_load_brings_one_level_probe_not_one_per_4x():
    """The level rule's probe comes ``LEVEL_PROBE_AFTER`` steps into a fall, while the level (a
    running mean over ~20 steps) is still on its way down: recorded at that level, the rule fired
    again at each further 4x of the fall (batch 64 to 1: probes 5, 17 and 48 steps in, against one
    at 21 with the rule's old 32-step wait; session 39). The probe's regime is now the lower of
    the level and the batch: one level probe (at batch 1 it looks twice, the second once the
    first is verified: ``test_a_level_probe_at_batch_1_looks_twice``), then the budgeted spacing."""
    p = _dormant_at_batch_64()
    assert p.dormant
    steps = _record_plans(p, lambda k, q: "P" if q and p.dormant else ("#" if q else "."))
    tv1, td1 = DEMO_COST[1]
    _simulate_hist(p, DEMO_HIST["chat"], 1, tv1, td1, steps=100, warm=0, life=20, **_hidden(1))
    trace = "".join(steps)
    assert "PP" in trace[:12] and trace.count("P") == 2, trace


def test_a_level_probe_at_batch_1_looks_twice():
    """A change of workload needs two rows of first drafts off the curve (``shift_min``), and a
    probe at batch 1 brings one: unless its accepted run surprised, the second row came a
    budgeted spacing later (~80 steps at batch 1), which in the bench's tasks c = 1 cell after free
    c = 64 is most of the cell. The probe the level rule brings on a single row now looks again
    once it is verified; a budgeted probe, or one of a larger batch, does not (simulated in
    session 39, tasks at batch 1 after the weak cells, adaptive / K = 15: 0.946 -> 0.966 with
    ENGINE_COST, 0.932 -> 0.949 with DEMO_COST, 30 seeds; the weak cells unchanged)."""
    p = _dormant_at_batch_64()
    assert p.dormant
    probes = _record_plans(p, lambda k, q: (p.acceptance.verified_steps, p._look_again, p.step)
                           if q and p.dormant else None)
    tv1, td1 = DEMO_COST[1]
    _closed_loop(p, 1, lambda g, k: np.minimum(np.zeros(1, dtype=np.int64), k), lambda n, _r: tv1(n), td1,
                 steps=200, warm=0, **_hidden(1))  # every draft rejected: no surprise, no shift
    assert len(probes) >= 3, probes
    (v1, look1, s1), (v2, look2, s2), (v3, look3, s3) = probes[:3]
    assert look1 == v1 and v2 == v1 + 1 and s2 - s1 <= 2 and look2 is None  # the second look at once
    assert look3 is None and s3 - s2 >= p.probe_every  # then one look each, at the budgeted spacing


def test_the_door_closes_only_while_not_drafting_wins_by_a_margin():
    """A request closed at the door never drafts, so the door (``closes_door``) stays open while
    the best drafting plan, at about this batch, is within ``DOOR_BELOW`` of no drafts (a marginal
    optimum flips with a step's timing), and closes where drafting clearly does not pay or the
    optimum is another batch's. Then, in the simulator with
    sentinels: a workload the drafter does not know at batch 64 still closes the door."""
    from dflash_vllm.adaptive import _CachedOptimum, _Optimum

    p = AdaptivePolicy(15)
    assert not p.closes_door(8)  # nothing planned yet
    ids = [f"r{i}" for i in range(32)]

    def planned(g, g0, drafts):
        opt = _Optimum(np.zeros(32, dtype=np.int64), g, g0, 15, 1.0, 0.1, 4, 128.0)
        p._optimum_cache = _CachedOptimum((32, ids), p.step, opt, drafts, 0, 0, 0)

    planned(0.5, 1.0, False)
    assert p.dormant and p.closes_door(32)
    planned(0.95, 1.0, False)  # dormant, by a hair, at this batch: open
    assert p.dormant and not p.closes_door(32) and not p.closes_door(36)
    assert p.closes_door(64) and p.closes_door(16)  # an optimum of another batch: closed, as before
    planned(1.0 * p.DOOR_BELOW - 1e-6, 1.0, False)
    assert p.closes_door(32)
    planned(1.3, 1.0, True)  # drafting
    assert not p.dormant and not p.closes_door(32) and not p.closes_door(64)
    assert not AdaptivePolicy(15, fixed=[0]).closes_door(32)

    tv, td = DEMO_COST[64]
    p = AdaptivePolicy(15)
    closes = []
    orig = p.plan

    def plan(*a, **k):
        out = orig(*a, **k)
        closes.append(p.closes_door(64))
        return out
    p.plan = plan
    _simulate_hist(p, DEMO_HIST["chat"], 64, tv, td, steps=300, life=20, sentinels=4)
    assert p.dormant and sum(closes[-100:]) >= 90, sum(closes[-100:])


def test_plain_step_anchors_while_drafting_stay_within_the_exploration_budget():
    """While drafting pays, a pair of plain steps now and then keeps the plain step's cost
    measured (``_choose``), each short of a drafted step's goodput by 1 - g0 / best_g. Spaced by
    one step's loss, as until session 44, the pairs cost twice ``explore_budget``: tasks at batch 1
    (DEMO_COST), ~2.1 % of the goodput against 1 %."""
    tv, td = DEMO_COST[1]
    p = AdaptivePolicy(15)
    steps = _record_plans(p, lambda k, q: (q, p.dormant))
    _simulate_hist(p, DEMO_HIST["tasks"], 1, tv, td, steps=2000, warm=0, seed=3)
    o = p.optimum
    loss_per_plain = 1.0 - o.g0 / o.g
    late = steps[400:]  # the plain-step line has its PLAIN_ANCHORS by then
    assert not any(d for _, d in late)
    plain = sum(1 for q, _ in late if q == 0)
    share = plain * loss_per_plain / len(late)
    print(f"tasks at batch 1: {plain} plain steps in {len(late)}, each {loss_per_plain:.2f} of a drafted step: {share:.4f}")
    assert 0.004 <= share <= 1.3 * p.explore_budget


def test_running_requests_closed_while_dormant_drop_their_queued_rows_but_prompt_blocks():
    """``ContextQueue.close`` (the proposer's ``_close_running``: dormant by a margin, no probe
    near): running requests keep no drafter context from then on, and their rows already queued
    are dropped (never a protected request's). With prefix caching, their prompt's full blocks
    stay queued and the blocks from there on are ledgered unwritten."""
    import torch

    from dflash_vllm.proposers.dflash import ContextQueue

    q = ContextQueue()
    q.protected = {"s"}
    q.end(set())
    q.add(*_rows(["a", "s", "b"], [2, 2, 2], 0), ["a", "s", "b"], np.array([2, 2, 2]))
    assert q.close(["a", "s"]) == 1 and q.incomplete == {"a"} and q.closed_requests == 1
    assert q.rows == 4 and q.shed_rows == 2
    q.add(*_rows(["a", "s", "b"], [1, 1, 1], 6), ["a", "s", "b"], np.array([1, 1, 1]))  # a's row: not queued
    assert q.rows == 6 and q.close(["a"]) == 0  # closed once
    feats, _, _ = q.take()
    assert feats[:, 0].long().tolist() == [2, 3, 4, 5, 7, 8]

    q = ContextQueue(block_size=4)
    ns = types.SimpleNamespace
    q.ledger = True
    q.end(set())
    q.schedule([ns(req_id="a", prompt_token_ids=[0] * 6, block_ids=([10, 11, 12],), num_computed_tokens=0)], None)
    pos = torch.arange(9)
    q.add(pos[:, None].float(), pos, pos, ["a"], np.array([9]), np.array([0]))  # prompt 6 + 3 generated
    assert q.close(["a"]) == 1 and q.incomplete == {"a"} and q.unwritten == {11, 12}
    q.add(pos[9:, None].float() + 9, pos[:1] + 9, pos[:1] + 9, ["a"], np.array([1]), np.array([9]))
    _, queued, _ = q.take()
    assert queued.tolist() == [0, 1, 2, 3]  # the prompt's full block only
    q2 = ContextQueue(block_size=4)
    q2.schedule([ns(req_id="a", prompt_token_ids=[0] * 6, block_ids=([10, 11],), num_computed_tokens=0)], None)
    assert q2.close(["a"]) == 0 and not q2.incomplete  # no ledger: nothing may go unwritten


def test_while_dormant_requests_keep_context_only_near_a_probe():
    """``probe_soon``: requests keep drafter context while dormant only within ``PROBE_AHEAD``
    steps of a due probe (or with a look, a surprise or a probe measurement pending), so that the
    steps in between queue nothing; ``plan_undraftable`` counts a step without any request that
    may draft as ``plan`` does, and ends the idle window."""
    from dflash_vllm.adaptive import _CachedOptimum, _Optimum

    p = AdaptivePolicy(15)
    assert p.probe_soon(8)  # nothing planned yet: keep context
    ids = [f"r{i}" for i in range(8)]
    opt = _Optimum(np.zeros(8, dtype=np.int64), 0.5, 1.0, 15, 1.0, 0.1, 4, 128.0)
    p._optimum_cache = _CachedOptimum((8, ids), p.step, opt, False, 0, 0, 0)
    spacing = p._probe_spacing(opt, 8)
    p.steps_since_draft = spacing - 1 - p.PROBE_AHEAD - 1
    assert not p.probe_soon(8)
    p.steps_since_draft += 1
    assert p.probe_soon(8)
    p.steps_since_draft = 0
    assert not p.probe_soon(8)
    p._look_again = 3
    assert p.probe_soon(8)
    p._look_again = None
    p.acceptance.surprised = True
    assert p.probe_soon(8)
    p.acceptance.surprised = False

    q = AdaptivePolicy(15)
    q._optimum_cache, q.steps_since_draft, q.idle_left = p._optimum_cache, 5, 3
    k, n = q.plan(ids, np.zeros(8, dtype=bool))
    assert n == 0 and not k.any() and q.steps_since_draft == 6 and q.idle_left == 0
    q.plan_undraftable(8)
    assert q.steps_since_draft == 7 and q._level is not None
