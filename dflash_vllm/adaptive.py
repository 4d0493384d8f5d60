"""Adaptive drafting: per engine step, how many drafts each request submits for verification.

The model (everything is learned online, on the host, from what vLLM already brings there):

- acceptance: the j-th draft of request i survives (is accepted with every draft before it) with
  probability ``s_i(j) = min(a_max, g(1) rho_i) prod_{2 <= l <= j} min(a_max, g(l))``. ``g(l)``
  is the server-wide conditional acceptance rate at draft position l (counts of "position l
  reached" / "position l accepted", decayed per engine step and per verified row, faster where
  no row reached that far, with one pseudo-count at the previous position's rate, the first's at
  an optimistic prior so that unexplored positions get tried; held to 16 rows per decoding
  request of the current batch, so that a long run at a large batch does not outweigh the few
  rows a small batch brings, ``AcceptanceModel.tick``; cut to a quarter when the first draft's
  acceptance over the last ~2 verify steps' rows is off g(1) by more than 0.4, a change of
  workload, ``AcceptanceModel.observe``);
  ``rho_i = (acc_i + m) / (exp_i + m)`` is the request's recent accepted drafts over the number
  the server-wide curve expected for the same verify steps, shrunk toward 1 by m pseudo-counts (recent = decayed by ``request_decay``
  per verify step). rho scales the first position only: the deeper rates g(l) are already
  conditional on the drafts before them surviving, i.e. measured on the requests that got that
  far. (Scaling every position by rho made one lucky request of a workload the drafter does not
  know look like a deep drafter: on the demo pair's chat prompts, rho ~1.8 on g(2..) ~0.5-0.8 left
  over from earlier prompts.)
- cost: one engine step costs
  ``T(k) = T_v(N0) + [D > 0] (delta + I(N0, D)) + [q > 0] T_d(R_d (q + 1), R)``, ``D = sum_i k_i``:
  ``T_v(N0)`` a plain step (everything but the drafting call: target forward, scheduling,
  sampling, the plan; on a K = 0 step the deferred context copy) over ``N0`` tokens verified
  without drafts (one per decoding request plus the prefill running alongside: a running mean
  of recent steps' prompt tokens that a burst moves only so far), from a line fitted to runs of
  plain decode steps only, plus the line's error at the recent plain steps of about the same
  batch (within 2x; see CostModel._local); ``delta`` the fixed cost of a step that verifies any
  draft (vLLM's speculative bookkeeping, a third of a small model's plain step on CPU);
  ``I(N0, D)`` what D drafts add to that step (piecewise linear in all verified tokens, knots at
  64, 256, 1024: flat while the device has idle compute, steeper once it has none), priced
  apart from a decoding request (a request brings scheduling, sampling and output handling
  besides its token: one slope for both priced 15 drafts at batch 1 as 15 more requests);
  ``T_d`` the drafter forward over ``R_d (q + 1)`` block tokens, R_d the requests that submit
  drafts (the forward runs for those only; the whole batch under tensor parallelism) and
  ``q = max_i k_i``, linear in those and in the step's R requests (what a call does per request
  of the batch whether it drafts or not: at batch 64 with 4 requests drafting, ~3x a call at
  batch 1 for the same block), with the context K/V write of the tokens the step verified (on CPU: the
  whole drafting call, vLLM's drafter input preparation included, which only drafted steps
  pay; the context K = 0 steps deferred is the price of drafting again, measured on probes
  instead). All are ridge regressions with exponential forgetting, fitted to the engine's own
  step times (from the runner's execute_model to the drafting call, plus the gap since the
  previous drafting call unless the server sat idle, plus the previous step's plan; and the
  drafting call). Until session 17 the context write of drafted steps was in no clock: 7 % of
  a step at batch 1 on the demo pair with K = 15 (0.79 of 11.1 ms), 9 % at batch 64, a cost
  drafting pays every step while K = 0 steps defer it (and, with prefix caching off, never
  write the rows of requests that end first).
- policy: maximise expected goodput ``G(k) = sum_i E_i(k_i) / T(k)``, with
  ``E_i(k) = 1 + sum_{j <= k} s_i(j)`` expected tokens emitted (the sum over every decoding
  request: those that cannot draft, closed at the door, emit their one token). For a cap q on k_i the optimum
  submits draft j of request i iff ``s_i(j) >= G* dI/dD`` (s_i is decreasing in j, so that is
  a prefix): a few Dinkelbach iterations on the ratio find G*, for every cap in a small set at
  once; ``q = 0`` (no drafter forward at all, the step costs a plain decode step plus the
  context K/V write) competes on the same terms. Acceptance alone cannot decide: the same
  survival curve is worth drafting at batch 1 and not at batch 64, which only ``dI/dD`` and
  ``T_d(R_d (q + 1))`` see. Where the device pads the step's matmuls to a few row counts (CPU:
  fixes/cpu_gemm_widths.py), a drafting plan then gets the drafts that fit the widths it already
  pays for (``AdaptivePolicy._fill_width``): the lines above cannot price that staircase. The
  cost model is taught the drafts the plan priced, not the added ones (``on_step``).

Exploration: the priors are optimistic (drafting looks free until measured); while drafting,
every ``dither_every``-th step submits one draft more or less per request (near the optimum
that costs next to nothing, and it keeps dI/dD measured even at a constant batch), and now and
then drafting pauses for two steps (the plain step's cost stays measured: the second of them,
the first after drafted steps costs more), spaced to cost at most ``explore_budget`` (1%) of the
expected goodput, and every ``zero_every`` steps while fewer than 12 plain steps were measured.
While drafting does not pay, a probe drafts after ``probe_every`` (32) steps or more, spaced so
that what probes lose stays within ``probe_budget`` (2%): the larger of the modelled loss (only
where a drafter forward over about the probe's block was timed recently: elsewhere T_d is an
extrapolation) and the one measured on earlier probes at about the same batch (wall time,
``_measure_probe``); sooner in two cases: a verify whose accepted run the curve gives less than
``surprise`` / rows brings the next probe at once (a change of workload needs two rows, and one
probe at batch 1 gives one), and a batch level (a running geometric mean over ~20 steps) 4x below
the last probe's brings one after ``LEVEL_PROBE_AFTER`` (8) steps without drafts (a change of
load often comes with a change of traffic; at batch 1 probes are otherwise ~130 steps apart; a
level 4x above waits for the budgeted spacing, ``_level_moved``; such a probe on a single row
looks twice, the second once the first is verified, since a change of workload needs two rows).
A probe drafts for ``PROBE_ROWS`` (8) requests of a larger batch, those verified longest ago
(``_probe_rows``), as deep as costs at most a quarter of a plain step more than one draft each
(on CPU with a small batch: the whole block, so one probe measures every position), every other
probe half as deep (so the slope in N and delta are told apart; a one-draft probe, as before, could not tell
prompts the drafter knows from ones it does not). Between probes, the steps that would plan no
drafts without reading anything new form an idle window (``_idle_window``): each costs a few
comparisons (``idle_step``), and the proposer hands their clocks over at the window's end.
Acceptance evidence ages per step and per
verified row, so positions no longer reached drift toward the rate of the position before them
(the first toward the optimistic prior): after a run of prompts the drafter does not know, the
first probes on prompts it does know bring deep drafting back within a short benchmark cell
(``test_follows_a_change_of_workload``). While drafting, a plain step is measured every 8
steps until two were measured within 4x of the current batch. (A cap of 48 rows of acceptance
evidence per position was tried, commit 60793f3: the full check's strong cells read 0.87-0.88 of
the best fixed K pooled in the two runs with it, 0.91-0.94 in the three without; removed.)

On by default (session 29) where it was measured: our DFlash on CPU, one rank, synchronous
scheduling (``adaptive_by_default``). On the full check it trails the best fixed K where the drafter
knows the prompts (0.90-0.93 of it pooled) but keeps serving near no speculation where it does not
(0.86-0.87x, against 0.36-0.37x for K = 15; bench/README.md, sessions 28-29), so for traffic nobody has
measured it is the safer default by far; issue #10's goals are still open. ``"dflash_adaptive":
false`` (or ``DFLASH_VLLM_FIXED_K=none``) submits num_speculative_tokens drafts every step, as
before; elsewhere (CUDA, tensor or pipeline parallelism) that stays the default and
``"dflash_adaptive": true`` turns the policy on.
``"dflash_fixed_k": N`` (or ``DFLASH_VLLM_FIXED_K=N``) pins N drafts per request per step
(N = 0: the drafter forward is skipped every step, only context K/V is written). vLLM's SpeculativeConfig rejects unknown keys, so the
key is taken out of the config before vLLM parses it (``pop_config_key``) and travels to the
engine processes in the environment, like the step-time table's path in metrics.py. For tests,
the environment variable also accepts a comma-separated cycle (``"0,0,7"``: per step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from . import envs

CONFIG_KEY = "dflash_fixed_k"
ADAPTIVE_KEY = "dflash_adaptive"


# -- the one configuration key -------------------------------------------------------------------
_from_config: str | None = None  # what a config put in the environment in this process (not the user)


def pop_config_key(engine_args) -> None:
    """Take ``dflash_fixed_k`` / ``dflash_adaptive`` out of EngineArgs.speculative_config (vLLM
    would reject them) and hand the choice to the engine processes through the environment.
    Neither key: adaptive drafting where it is on by default (``adaptive_by_default``), unless
    the user set DFLASH_VLLM_FIXED_K; what an earlier engine's config set in this process does
    not carry over to the next engine."""
    global _from_config
    spec = getattr(engine_args, "speculative_config", None)
    if not isinstance(spec, dict):
        return
    if _from_config is not None and envs.value(envs.FIXED_K) == _from_config:
        envs.unset(envs.FIXED_K)
    _from_config = None
    if ADAPTIVE_KEY in spec:
        spec = dict(spec)
        on = spec.pop(ADAPTIVE_KEY)
        engine_args.speculative_config = spec
        if CONFIG_KEY not in spec:
            _from_config = "adaptive" if on else "none"
    if CONFIG_KEY in spec:
        _from_config = _take_key(engine_args, spec)
    elif _from_config is None and envs.value(envs.FIXED_K) == "" and adaptive_by_default(engine_args, spec):
        _from_config = "adaptive"
    if _from_config is not None:
        envs.set(envs.FIXED_K, _from_config)
    _prefer_sync_scheduling(engine_args, engine_args.speculative_config)


def adaptive_by_default(engine_args, spec: dict) -> bool:
    """Adaptive drafting is the default where it was measured against fixed K and no
    speculation (bench/README.md, the full check): our DFlash on CPU, one rank, synchronous
    scheduling. Elsewhere K every step stays the default until measured there: on CUDA the
    policy would turn off the async scheduling vLLM picks for DFlash (no GPU run yet, issue
    #15), and under tensor or pipeline parallelism every rank runs the whole drafter forward
    every step (its length must match across ranks), so "no drafts" would not skip it."""
    from ._plugin import native_requested

    if spec.get("method") != "dflash" or native_requested() or getattr(engine_args, "async_scheduling", None):
        return False
    if (getattr(engine_args, "tensor_parallel_size", 1) or 1) * (getattr(engine_args, "pipeline_parallel_size", 1) or 1) > 1:
        return False
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def _prefer_sync_scheduling(engine_args, spec: dict) -> None:
    """Per-request draft lengths reach vLLM's scheduler only through take_draft_token_ids, which
    vLLM 0.32 skips under async scheduling (it schedules K placeholder slots per request before
    the drafts exist). vLLM turns async scheduling on by default for DFlash on CUDA; with the
    adaptive policy on (or K pinned below num_speculative_tokens) and the user's choice unset,
    we turn it off (an explicit ``--async-scheduling`` wins, and then K stays fixed)."""
    from ._plugin import native_requested

    k_max = spec.get("num_speculative_tokens") or 0
    fixed = fixed_k_from_env(k_max)
    varies = fixed is None or any(k != k_max for k in fixed)  # a pin at K itself is fine async
    if (spec.get("method") == "dflash" and not native_requested() and varies
            and getattr(engine_args, "async_scheduling", False) is None):
        from . import patches

        patches.require("sync-scheduling-default")
        engine_args.async_scheduling = False


def _take_key(engine_args, spec: dict) -> str:
    """The pinned K from ``dflash_fixed_k`` as the environment's value ("none": K every step)."""
    spec = dict(spec)
    value = spec.pop(CONFIG_KEY)
    engine_args.speculative_config = spec
    if value is None:
        return "none"
    from .config import DFlashConfigError

    k_max = spec.get("num_speculative_tokens")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (k_max is not None and value > k_max):
        raise DFlashConfigError(
            f"speculative config: {CONFIG_KEY}={value!r} must be an integer in 0..num_speculative_tokens "
            f"({k_max}); omit it for adaptive drafting, or set \"{ADAPTIVE_KEY}\": false for num_speculative_tokens "
            "every step"
        )
    return str(value)


def fixed_k_from_env(k_max: int) -> list[int] | None:
    """The pinned K (a cycle of one or more values, each clipped to 0..k_max), or None: adaptive.
    Unset or "none": k_max every step (pop_config_key sets "adaptive" where that is the default)."""
    raw = envs.value(envs.FIXED_K)
    if raw in ("adaptive", "Adaptive"):
        return None
    if raw in ("", "none", "None"):
        return [k_max]
    vals = [min(k_max, max(0, int(x))) for x in raw.split(",") if x.strip()]
    return vals or None


# -- acceptance -----------------------------------------------------------------------------------
class AcceptanceModel:
    """Server-wide conditional acceptance per draft position, and per-request skill rho_i."""

    def __init__(self, k_max: int, prior_rate: float = 0.8, prior_weight: float = 2.0, decay: float = 0.99,
                 row_decay: float = 0.995, request_decay: float = 0.85, request_prior: float = 2.0,
                 max_rate: float = 0.98, chain: float = 1.0, unreached_decay: float = 0.9,
                 rows_per_request: float = 16.0, shift_decay: float = 0.7, shift_gap: float = 0.4,
                 shift_keep: float = 0.25, shift_min: float = 1.6, surprise: float = 0.1):
        self.k_max = k_max
        self.rows_per_request = rows_per_request
        self.prior_rate, self.decay, self.row_decay, self.max_rate = prior_rate, decay, row_decay, max_rate
        self.request_decay, self.request_prior = request_decay, request_prior
        self.chain, self.unreached_decay = chain, unreached_decay
        self._positions = np.arange(1, k_max + 1)
        self.accepted = np.full(k_max, prior_rate * prior_weight)  # decayed "position j accepted"
        self.reached = np.full(k_max, prior_weight)  # decayed "position j verified"
        self._ticked: tuple[float, float] | None = None  # ticks not yet applied to both (see tick)
        self.requests: dict[str, list[float]] = {}  # req_id -> [decayed accepted, decayed expected, last verify step]
        self.verified_steps = 0  # verify steps observed (a plan made before one is out of date)
        self.last_accepted = 0  # drafts accepted, all rows, in the latest verify step
        # A change of workload (see observe): first drafts verified / accepted over the last few
        # verify steps (decayed by ``shift_decay`` per step), and how many changes were seen.
        self.shift_decay, self.shift_gap, self.shift_keep, self.shift_min = shift_decay, shift_gap, shift_keep, shift_min
        self._first = [0.0, 0.0]
        self.shifts = 0
        # A verified row whose accepted run the curve gives less than ``surprise`` (see observe):
        # the policy probes again at once (AdaptivePolicy._choose).
        self.surprise = surprise
        self.surprised = False

    def rates(self) -> np.ndarray:
        """g(j), j = 1..K: each position's evidence, with ``chain`` pseudo-counts at the rate of
        the position before it (the first: at the optimistic prior). A position with little
        recent evidence reads like the one before it, not like whatever workload last reached it."""
        self._apply_ticks()
        g = np.empty(self.k_max)
        prev, w = self.prior_rate, self.chain
        acc, reached = self.accepted.tolist(), self.reached.tolist()
        for j in range(self.k_max):
            prev = g[j] = (acc[j] + w * prev) / (reached[j] + w)
        return g

    def observe(self, req_ids: list[str], num_drafted: np.ndarray, num_accepted: np.ndarray) -> None:
        """One verify step: request req_ids[i] had num_drafted[i] > 0 drafts, num_accepted[i] accepted."""
        if not req_ids:
            return
        self._apply_ticks()
        self.verified_steps += 1
        d = np.minimum(np.asarray(num_drafted, dtype=np.int64), self.k_max)
        a = np.minimum(np.asarray(num_accepted, dtype=np.int64), d)
        self.last_accepted = int(a.sum())
        trials = np.minimum(a + 1, d)  # positions that were verified (the first rejection included)
        g = self.rates()
        # A run of accepted drafts the curve makes unlikely (one row of a probe at batch 1 after
        # a workload the drafter did not know): not yet evidence enough to move the curve (a change
        # needs shift_min rows, see below), but reason to verify again now rather than a probe
        # spacing later (~80-130 steps at batch 1).
        if a.any():
            run = np.concatenate([[1.0], np.cumprod(np.minimum(g, self.max_rate))])[a]  # P(accepted >= a_i)
            if float(run.min()) < self.surprise / len(req_ids):  # over r rows, one such run is r times likelier
                self.surprised = True
        expected = np.concatenate([[0.0], np.cumsum(g)])[trials]  # sum_{j <= trials} g(j)
        n = self.k_max + 1
        # Forgetting per verified row as well as per step (``tick``): the curve follows a change
        # of workload within ~200 rows or ~100 steps, whichever comes first.
        w = self.row_decay ** len(req_ids)
        # A change of workload: the first draft's acceptance over the last few verify steps
        # (>= shift_min first drafts) off the curve's g(1) by more than shift_gap. The first
        # position is the clean signal (the deeper ones are bursty: tasks prompts at batch 1
        # accept 0-2 or 13-15 of 15); then only shift_keep of the old evidence stays. Without it,
        # chat prompts at batch 1 after task prompts moved g(1) from 0.98 by ~1/17 per step (16
        # rows of evidence per decoding request), and the policy drafted on for ~25 steps at a
        # real g(1) of ~0.25 (session 22, bench profile trace).
        f, rows = self._first, len(req_ids)
        keep = self.shift_decay if f[0] <= 2 * rows else self.shift_decay * 2 * rows / f[0]  # ~2 steps of this batch at most
        f[0] = keep * f[0] + rows
        f[1] = keep * f[1] + int(np.count_nonzero(a))
        if f[0] >= self.shift_min and abs(f[1] / f[0] - g[0]) > self.shift_gap:
            w *= self.shift_keep
            f[0] = f[1] = 0.0
            self.shifts += 1
        self.reached *= w
        self.accepted *= w
        # Positions no row reached this step age faster: after prompts the drafter knows, the deep
        # positions held their old rates (0.8-0.9) while the first fell to 0.2-0.3 on prompts it
        # did not know, and the policy went on drafting 15 deep (chat after code, batch 1).
        far = self._positions > int(trials.max())
        self.reached[far] *= self.unreached_decay
        self.accepted[far] *= self.unreached_decay
        self.reached += np.cumsum(np.bincount(trials, minlength=n)[::-1])[::-1][1:]  # #{trials >= j}
        self.accepted += np.cumsum(np.bincount(a, minlength=n)[::-1])[::-1][1:]  # #{a >= j}
        rd = self.request_decay
        reqs = self.requests
        for rid, ai, ei in zip(req_ids, a.tolist(), expected.tolist()):
            st = reqs.get(rid)
            if st is None:
                reqs[rid] = [float(ai), ei, self.verified_steps]
            else:
                st[0] = st[0] * rd + ai
                st[1] = st[1] * rd + ei
                st[2] = self.verified_steps

    def tick(self, num_decode: int = 0) -> None:
        """One engine step, drafted or not: evidence ages with time too, so that positions no
        longer verified (a run of steps without drafts, or short drafts) drift back to the
        optimistic prior and get tried again, instead of holding an old workload's rates.
        And it holds at most ``rows_per_request`` rows per decoding request of the current
        batch (all positions scaled alike): evidence gathered at batch 64 (~230 rows) aged at
        batch 1 by the step decay alone, ~470 steps to fall to a couple of rows, and the bench's
        tasks c = 1 cell after the free c = 64 one did not draft again within the cell.
        Both arrays are only ever scaled alike here, so the ticks wait as one factor (and
        position 1's count), applied when they are next read (``_apply_ticks``): a step
        without drafts then touches two floats, not four arrays."""
        f, top = self._ticked if self._ticked is not None else (1.0, float(self.reached[0]))
        f, top = f * self.decay, top * self.decay
        if num_decode and self.rows_per_request:
            cap = self.rows_per_request * num_decode
            if top > cap:
                f, top = f * (cap / top), cap
        self._ticked = (f, top)

    def _apply_ticks(self) -> None:
        if self._ticked is not None:
            f = self._ticked[0]
            self._ticked = None
            self.reached *= f
            self.accepted *= f

    def forget(self, req_ids) -> None:
        for rid in req_ids:
            self.requests.pop(rid, None)

    def survival(self, req_ids: list[str]) -> np.ndarray:
        """s_i(j) for the given requests: [len(req_ids), K]."""
        m = self.request_prior
        get = self.requests.get
        rho = np.array([(st[0] + m) / (st[1] + m) if (st := get(r)) is not None else 1.0 for r in req_ids])
        cond = np.repeat(np.minimum(self.rates(), self.max_rate)[None, :], len(req_ids), axis=0)
        cond[:, 0] = np.minimum(cond[:, 0] * rho, self.max_rate)
        return np.cumprod(cond, axis=1)


# -- cost -----------------------------------------------------------------------------------------
class _Ridge:
    """Exponentially forgetting ridge regression toward a prior (intercept: the first
    measurement; slopes: 0, i.e. optimistic until measured).

    Observations wait in a list until the coefficients are next solved (or 256 wait), then go
    in as one weighted product: ``A <- d^m A + sum_i d^(m-1-i) x_i x_i^T`` is what m
    one-at-a-time updates give, for a few numpy calls instead of 4 per observation per step
    (the policy solves every few steps; per step it only appends)."""

    MAX_PENDING = 256

    def __init__(self, dim: int, decay: float, ridge):
        self.dim, self.decay = dim, decay
        self.ridge = np.diag(np.broadcast_to(np.asarray(ridge, dtype=np.float64), (dim,)))
        self._A = np.zeros((dim, dim))
        self._b = np.zeros(dim)
        self._pending: list[tuple] = []  # (x as a tuple of floats, y)
        self.prior = np.zeros(dim)
        self.n = 0
        self._theta: np.ndarray | None = None  # as last solved
        self._stale = True

    def observe(self, x, y: float) -> None:
        if self.n == 0:
            self.prior[0] = y  # warm start: the first measurement as intercept, slopes 0 (optimistic)
        self._pending.append((tuple(x), y))
        self.n += 1
        self._stale = True
        if len(self._pending) >= self.MAX_PENDING:
            self._flush()

    def _flush(self) -> None:
        p = self._pending
        if not p:
            return
        m = len(p)
        X = np.array([x for x, _ in p], dtype=np.float64)
        y = np.array([v for _, v in p], dtype=np.float64)
        w = self.decay ** np.arange(m - 1, -1, -1, dtype=np.float64)
        Xw = X * w[:, None]
        self._A = self._A * self.decay ** m + Xw.T @ X
        self._b = self._b * self.decay ** m + Xw.T @ y
        p.clear()

    @property
    def A(self) -> np.ndarray:
        self._flush()
        return self._A

    @property
    def b(self) -> np.ndarray:
        self._flush()
        return self._b

    def theta(self) -> np.ndarray:
        if self._stale:
            r = self.ridge
            self._theta = np.linalg.solve(self.A + r, self.b + r @ self.prior)
            self._stale = False
        return self._theta

    def last_theta(self) -> np.ndarray:
        """The coefficients as last solved (no solve once one was made: at most the few
        observations since the last plan behind)."""
        return self._theta if self._theta is not None else self.theta()


class CostModel:
    """T_v(N0, D): step time without the drafter forward, for N0 tokens verified without drafts
    (one per decoding request, plus prefill) and D drafts verified with them; T_d(B): drafter
    forward over B block tokens.

    A plain step (D = 0) is priced from a line in N0 fitted to runs of plain decode steps only,
    plus that line's error at the recent plain steps of about the same batch (``_local``). A
    drafted step is that plain step plus what drafts add: ``delta`` (the fixed cost of a step
    that verifies any draft: vLLM's speculative bookkeeping, spec-decode metadata, rejection
    sampler, drafter input preparation; on CPU with a small target a third of a plain step) and
    the increment of a second fit, over every step, in the drafts:
    ``T = a + b N0 + c D + sum_h c_h max(N0 + D - knot_h, 0) + delta [D > 0]``, i.e.
    ``c D + sum_h c_h (max(N0 + D - knot_h, 0) - max(N0 - knot_h, 0))`` (hinges on all verified
    tokens: flat while the device has idle compute, steeper once it has none). A decoding
    request and a draft are priced apart: a request brings scheduling, sampling and output
    handling besides its token (the demo pair on CPU, bench T_v: ~0.2 ms per request from batch
    1 to 64 against ~0.06 ms per draft at batch 64, K = 15). Until session 20 both were one slope in N = N0 + D and a drafted step
    was floored at the plain line at N, i.e. D drafts priced as D more requests: 960 drafts at
    batch 64 at ~200 ms against ~60 measured, 15 drafts at batch 1 as a plain step of 16.
    (Batch size R matters to the choice only through N0 and B: R itself is the same for every
    candidate plan of a step.)"""

    KNOTS = (64.0, 256.0, 1024.0)
    SCALE = 256.0
    # The drafting call's batch feature: requests less those of the first timing (whose cost is
    # the intercept's prior: with the batch never moving, the feature stays 0 and the fit is the
    # line in block tokens alone; uncentred, a first timing of a 1,024-token block at batch 64
    # held the intercept high while the batch's slope went negative, clamped, and a batch-64
    # block was priced at 5x its cost), per 16 requests (so that ~0.15 ms per request, batch 64
    # against batch 1 in the engine, is a coefficient the ridge barely holds back: per 256
    # requests, one timing at a new batch moved it a third of the way).
    BATCH_SCALE = 16.0
    PLAIN_MIN = 3
    LOCAL_WITHIN = 256  # steps a plain step measured near a batch stays in use (_local, plain_known_near)

    def __init__(self, decay: float = 0.99, ridge: float = 0.05):
        # The hinges stay 0 (one straight line) unless the data insist: a kink fitted on a
        # narrow range of N would extrapolate badly to the plans not taken. The draft slope c
        # and delta start at 0 (optimistic, like the other slopes) and are learned from the
        # drafted steps, the plain steps the policy keeps taking, and the dither around the plan.
        # Features: (1, N0, hinges at N0 + D, D, [D > 0]).
        self.verify = _Ridge(4 + len(self.KNOTS), decay, (ridge, ridge, *[2.0] * len(self.KNOTS), ridge, 2.0))
        # Plain steps alone (the same shape in N0, forgetting per plain step): the cost every
        # plan is measured against, read near N0 only, where these steps are. While the policy
        # drafts on every step, plain steps are one in 32 or fewer, and in the shared fit above
        # delta (held toward 0) was then barely identified: on the demo pair, after prompts the
        # drafter knows, the fit priced a plain step at 4.0-4.9 ms where it cost 3.1, and the
        # policy went on drafting for ~170 steps on prompts it did not know (chat, batch 1).
        self.plain = _Ridge(2 + len(self.KNOTS), decay, (ridge, ridge, *[2.0] * len(self.KNOTS)))
        self.draft = _Ridge(3, decay, ridge)  # (1, block tokens, requests in the step): see t_draft
        self._draft_r0: float | None = None  # the batch of the first drafting call timed (t_draft)
        self._memo: tuple = (None, None, {})  # the plain line as a list, and its values, per solve (see t_verify)
        self._th_memo: tuple = (None, None)  # the verify fit as last read, and as a list (see t_verify)
        self._steps = 0
        # log2 bucket of N -> (EMA of N, EMA of seconds, step of the latest plain step, of the one before)
        self._near: dict[int, tuple[float, float, int, int]] = {}
        self._draft_near: dict[tuple[int, int], int] = {}  # log2 buckets (block tokens, batch) -> step of the latest T_d sample

    def _local(self, n: float, plain: list) -> float:
        """The plain-step line's (coefficients ``plain``) error at the recent plain steps near n
        verified tokens (same power-of-2 bucket, last ``LOCAL_WITHIN`` steps; EMAs of their N
        and time), else 0. The line is fitted to every plain step the policy kept (forgetting
        per plain step) and its slope is held by the ridge: after a run at batch 64 it priced
        batch 1's plain step at 4.5x its cost in simulation, and two plain steps at batch 1
        moved it only halfway. The local error follows from the first one."""
        e = self._near.get(self._bucket(n))
        if not self.LOCAL_WITHIN or e is None or self._steps - e[2] > self.LOCAL_WITHIN or self.plain.n < self.PLAIN_MIN:
            return 0.0
        return e[1] - max(self._line(plain, e[0]), 0.0)

    @staticmethod
    def _bucket(n: float) -> int:
        return max(int(n), 1).bit_length() - 1

    def plain_known_near(self, n: float) -> bool:
        """Whether two plain decode steps at about n verified tokens (within 4x) were measured
        in the last ``LOCAL_WITHIN`` steps: elsewhere the plain-step price is the line's extrapolation
        (fitted at batch 64, it priced batch 1's 4.5 ms plain step at 5-9 ms). Within 2x, the
        drain at the end of every benchmark cell (the batch falling through sizes no plain step
        was measured at) called for anchors; the full run with that rule read 0.88 of the best
        fixed K pooled in the strong cells against 0.93-0.94 before it (cause not isolated)."""
        b, near, now = self._bucket(n), self._near, self._steps
        return any(x in near and now - near[x][3] <= self.LOCAL_WITHIN for x in range(b - 2, b + 3))

    def _phi(self, n0: float, d: float) -> tuple:
        s, n = self.SCALE, n0 + d
        return (1.0, n0 / s, *[max(n - kn, 0.0) / s for kn in self.KNOTS], d / s, float(d > 0))

    def observe_step(self, seconds_without_draft: float, num_tokens: int, drafts: int = 0,
                     transient: bool = False) -> None:
        """A step over ``num_tokens`` verified tokens, ``drafts`` of them drafts. ``transient``:
        a plain step right after one that verified drafts, or one with prefill. The first costs
        more than the plain steps after it (vLLM leaves its speculative path; on the demo pair
        5-9 ms against 3), so both stay out of the plain-step line: a run of plain decode steps
        is what the policy weighs drafting against."""
        self._steps += 1
        d = float(min(max(drafts, 0), num_tokens))
        n0 = float(num_tokens) - d
        self.verify.observe(self._phi(n0, d), seconds_without_draft)
        if not d and not transient:
            self.plain.observe(self._phi(n0, 0.0)[:2 + len(self.KNOTS)], seconds_without_draft)
            # Recent plain steps near this N (see _local and plain_known_near). One step counts
            # for at most twice the recent mean: single plain steps of 26-45 ms where plain steps
            # cost 6-10 (batch 1-8 on the demo pair; a GC pause, the VM) set the bucket's price
            # to 1.5-3x for many steps, and drafting looked cheap next to it. A real rise is
            # still followed, by up to 1.5x per plain step.
            b = self._bucket(num_tokens)
            n, y, old = n0, seconds_without_draft, self._near.get(b)
            if old is not None and self._steps - old[2] <= self.LOCAL_WITHIN:
                n, y = 0.5 * old[0] + 0.5 * n, 0.5 * old[1] + 0.5 * min(y, 2.0 * old[1])
            self._near[b] = (n, y, self._steps, old[2] if old is not None else -(1 << 30))

    def observe_draft(self, seconds: float, block_tokens: int, num_reqs: int) -> None:
        """A drafting call over ``block_tokens`` block tokens in a step of ``num_reqs`` requests."""
        if self._draft_r0 is None:
            self._draft_r0 = float(num_reqs)
        self.draft.observe((1.0, block_tokens / self.SCALE, (num_reqs - self._draft_r0) / self.BATCH_SCALE), seconds)
        self._draft_near[(self._bucket(block_tokens), self._bucket(num_reqs))] = self._steps

    def draft_known_near(self, block_tokens: float, num_reqs: float) -> bool:
        """Whether a drafting call over about ``block_tokens`` (within 4x) in a batch of about
        ``num_reqs`` (within 4x) was timed in the last ``LOCAL_WITHIN`` steps. Elsewhere T_d is
        the fit's extrapolation: fitted to blocks of 512-832 tokens (batch 64), it priced batch
        1's 16-token block at 8.4 ms against 1.8 measured (session 30, scratch ``probedue.py``:
        free c = 64, then tasks c = 1); and a 64-token block timed at batch 64 (4 requests
        drafting, the rest closed at the door) says little about one at batch 1."""
        return self.draft_known_for(block_tokens, num_reqs) is not None

    def draft_known_for(self, block_tokens: float, num_reqs: float) -> int | None:
        """For how many more steps ``draft_known_near(block_tokens, num_reqs)`` stays true
        without a new timing (counted in observed steps), or None if it is false now."""
        b, r = self._bucket(block_tokens), self._bucket(num_reqs)
        last = max((t for (x, y), t in self._draft_near.items() if abs(x - b) <= 2 and abs(y - r) <= 2),
                   default=-(1 << 30))
        left = last + self.LOCAL_WITHIN - self._steps
        return left if left >= 0 else None

    def _coefficients(self, stale: bool):
        """(verify fit, plain line, the array the plain line is read from): as last solved with
        ``stale``; the plain line is the verify fit's N0 part until it has ``PLAIN_MIN`` steps of
        its own."""
        th = self.verify.last_theta() if stale else self.verify.theta()
        if self.plain.n >= self.PLAIN_MIN:
            plain = self.plain.last_theta() if stale else self.plain.theta()
            return th, plain, plain
        return th, th[:2 + len(self.KNOTS)], th

    def t_verify(self, n0, drafts=0, stale: bool = False):
        """T_v for n0 tokens verified without drafts and ``drafts`` drafts (each a float or an
        array; arrays broadcast); ``stale``: from the coefficients as last solved (no solve). A
        plain step: the plain line plus its local error; a drafted one: that plus delta plus the
        drafts' increment (never below the plain step plus delta)."""
        th, plain, src = self._coefficients(stale)
        if np.ndim(n0) == 0 and np.ndim(drafts) == 0:  # one value (most calls): Python floats
            memo = self._memo
            if memo[0] is not src:  # solved since: the plain line as a list, once
                memo = self._memo = (src, plain.tolist(), {})
            n0 = float(n0)
            line = memo[2].get(n0)
            if line is None:
                line = self._line(memo[1], n0)
                if len(memo[2]) < 4096:
                    memo[2][n0] = line
            t_plain = max(line + self._local(n0, memo[1]), 0.0)
            if drafts <= 0:
                return t_plain
            tm = self._th_memo
            if tm[0] is not th:  # (Python floats: the numpy scalar path cost ~40 us a step in on_step's clip)
                tm = self._th_memo = (th, th.tolist())
            return t_plain + self._increment(tm[1], n0, float(drafts))
        n0 = np.asarray(n0, dtype=np.float64)
        d = np.asarray(drafts, dtype=np.float64)
        t_plain = self._line(plain, n0)
        if self._near:  # the local error depends on n0 only through its bucket
            pl = plain.tolist()
            if n0.ndim:
                t_plain = t_plain + np.vectorize(lambda x: self._local(x, pl), otypes=[float])(n0)
            else:
                t_plain = t_plain + self._local(float(n0), pl)
        t_plain = np.maximum(t_plain, 0.0)
        if not np.any(d > 0):
            return np.broadcast_to(t_plain, np.broadcast(n0, d).shape).astype(np.float64)
        return t_plain + np.where(d > 0, self._increment(th, n0, d), 0.0)

    def increment_at(self, n0: float):
        """What d drafts add to a plain step at n0, as a function of d (an int; 0 for d <= 0):
        ``_increment`` in Python floats, the same operations in the same order, so the same
        values as ``t_verify(n0, d) - t_verify(n0)`` (its arrays, until session 47:
        ``t_verify_drafted``). The optimum prices each of ~11 plans per round with it
        (``AdaptivePolicy._optimum``), where numpy's per-call cost on arrays of 11 was a third of
        its time."""
        th = self.verify.theta().tolist()
        s, c = self.SCALE, len(self.KNOTS)
        slope, delta = th[2 + c], self._delta(th)
        hinges = [(h, kn, max(n0 - kn, 0.0)) for h, kn in zip(th[2:2 + c], self.KNOTS) if h]

        def increment(d: int) -> float:
            if d <= 0:
                return 0.0
            x = slope * (d / s)
            for h, kn, below in hinges:
                x = x + h * (max(n0 + d - kn, 0.0) - below) / s
            return delta + max(x, 0.0)
        return increment

    def draft_at(self, num_reqs: float):
        """``t_draft`` at a batch of ``num_reqs`` as a Python function of the block tokens (an
        int): its line, the same operations in Python floats (see ``increment_at``)."""
        a, b, per_req = self.draft_terms(num_reqs)
        scale = self.SCALE

        def t_draft(block_tokens: int) -> float:
            return max(a + b * block_tokens / scale + per_req, 0.0)
        return t_draft

    def _increment(self, th, n0, d):
        """What d > 0 drafts add to a plain step at n0: delta plus the fit's increment in the
        drafts (never negative)."""
        s, c = self.SCALE, len(self.KNOTS)
        mx = max if isinstance(th, list) else np.maximum  # (a list: Python floats throughout, t_verify's scalar path)
        inc = th[2 + c] * (d / s)
        for h, kn in zip(th[2:2 + c], self.KNOTS):
            if h:
                inc = inc + h * (mx(n0 + d - kn, 0.0) - mx(n0 - kn, 0.0)) / s
        return self._delta(th) + mx(inc, 0.0)

    def _line(self, th, n):
        """The piecewise-linear shape in n (a float, or an array), coefficients th (intercept,
        slope, hinges)."""
        s = self.SCALE
        t = th[0] + th[1] * (n / s)
        for c, kn in zip(th[2:2 + len(self.KNOTS)], self.KNOTS):
            if c:
                t = t + c * ((max(n - kn, 0.0) if isinstance(n, float) else np.maximum(n - kn, 0.0)) / s)
        return t

    @staticmethod
    def _delta(th) -> float:
        return max(0.0, float(th[-1]))

    def delta(self) -> float:
        """The fixed cost of a step that verifies any draft (never negative)."""
        return self._delta(self.verify.theta())

    def slope_verify(self, n: float) -> float:
        """dT_v/dD at n verified tokens: what one more draft costs (never negative: a step does
        not get cheaper with more tokens)."""
        th, c = self.verify.theta(), len(self.KNOTS)
        return max(0.0, (th[2 + c] + sum(h for h, kn in zip(th[2:2 + c], self.KNOTS) if n > kn)) / self.SCALE)

    def t_draft(self, block_tokens, num_reqs: float) -> np.ndarray:
        """The drafting call over ``block_tokens`` block tokens (a float or an array) in a step
        of ``num_reqs`` requests."""
        a, b, per_req = self.draft_terms(num_reqs)
        return np.maximum(a + b * np.asarray(block_tokens, dtype=np.float64) / self.SCALE + per_req, 0.0)

    def draft_terms(self, num_reqs: float) -> tuple[float, float, float]:
        """``t_draft``'s line at a batch of ``num_reqs``: (intercept, slope per SCALE block
        tokens, the batch's term); ``t_draft(B) = max(a + b * B / SCALE + per_req, 0)``."""
        th, r0 = self.draft.theta(), self._draft_r0
        per_req = max(float(th[2]), 0.0) * (num_reqs - r0) / self.BATCH_SCALE if r0 is not None else 0.0
        return float(th[0]), max(float(th[1]), 0.0), per_req

    @property
    def ready(self) -> bool:
        return self.verify.n > 0


# -- the policy -----------------------------------------------------------------------------------
def _near(a: int, b: int) -> bool:
    """Batch sizes close enough to plan with the same prices (within a quarter; 1 and 2 are not)."""
    return 4 * b <= 5 * a and 4 * a <= 5 * b


@dataclass
class _ProbeMeasurement:
    """A probe being measured (see ``AdaptivePolicy._measure_probe``)."""

    batch: int  # requests in the probe
    verified: int  # AcceptanceModel.verified_steps when it was planned
    first: float | None = None  # its own period (its drafting call and its verify), once seen


class _Optimum(NamedTuple):
    """What ``AdaptivePolicy._optimum`` found (indexable like the tuple it was)."""

    k: np.ndarray | None  # best k per decoding request: min(#{j: s_i(j) >= thr}, cap)
    g: float  # its goodput
    g0: float  # goodput without drafts
    q_probe: int  # a probe's depth
    probe_loss: float  # what a probe loses against a plain step, in plain steps
    thr: float  # the survival threshold of the best k
    cap: int  # its cap
    probe_block: float = 0.0  # the block tokens of a probe's drafter forward


class _CachedOptimum(NamedTuple):
    """The last optimum the policy computed, and what it was computed for (see ``_choose``)."""

    batch: tuple  # (num_reqs, decoding request ids)
    step: int
    opt: _Optimum | None
    drafts: bool  # it drafts (above the margin)
    verified: int  # verify steps observed when it was computed
    streak: int  # recomputations in a row with the same prices (threshold, cap) as the one before; > 0: settled
    shifts: int  # AcceptanceModel.shifts when it was computed


class AdaptivePolicy:
    """Chooses per-request submitted draft lengths k_i and the drafter block q = max k_i."""

    PLAIN_ANCHORS = 12  # plain steps to measure before plain anchors follow the exploration budget
    SETTLE_STEPS = 64  # steps measured before a drafting plan may be reused (see _choose)
    REPLAN_BACKOFF = 4  # a drafting plan settled 3 times running is reused up to this many replan_every's
    IDLE_REPLAN = 32  # steps a "no drafts" optimum is reused for (see _choose; 16 until session 30)
    LEVEL_DECAY = 0.95  # the batch's level for the probe rule (_level_bucket)
    COVER_EVERY = 8  # steps between plain anchors while the batch is far from every measured plain step
    LEVEL_PROBE_AFTER = 8  # steps without drafts before a probe once the load fell 4x (_probe_spacing)
    PROBE_ROWS = 8  # a probe drafts for this many requests of a larger batch (_probe_rows)
    PROBE_AHEAD = 4  # requests keep drafter context while dormant only this near a probe (probe_soon)
    DOOR_BELOW = 0.9  # the door closes while drafting's best goodput is below this of no drafts (closes_door)

    def __init__(self, k_max: int, fixed: list[int] | None = None, probe_every: int = 32,
                 dither_every: int = 4, zero_every: int = 32, explore_budget: float = 0.01,
                 margin: float = 0.01, outlier: float = 5.0, replan_every: int = 4, probe_budget: float = 0.02,
                 forward_drafting_rows_only: bool = True):
        self.k_max = k_max
        self.fixed = fixed
        self.acceptance = AcceptanceModel(k_max)
        self.cost = CostModel()
        caps = sorted({c for c in (1, 2, 3, 4, 6, 8, 11, 15, 23, 31, k_max) if 1 <= c <= k_max})
        self.caps = np.array(caps, dtype=np.int64)
        self.probe_every, self.dither_every, self.zero_every = probe_every, dither_every, zero_every
        self.explore_budget = explore_budget
        self.margin, self.outlier = margin, outlier
        self.replan_every, self.probe_budget = replan_every, probe_budget
        self._probes = 0
        self._optimum_cache: _CachedOptimum | None = None
        self.step = 0
        self.steps_since_draft = 0
        self.prefill_tokens = 0.0  # EMA of verified tokens that are neither anchors nor drafts
        self._gap_mean: float | None = None
        self._last_submitted = 0
        self._prev_submitted = 0  # the plan before that
        self._anchor_next = False  # the second step of a plain-step anchor is due
        self._last_anchor = -(1 << 30)
        # What probes cost, measured (see _measure_probe): the wall time between consecutive
        # plans, its running mean over plain steps, the probe being measured, and per log2
        # batch bucket a running mean of the measured loss in plain steps.
        self._prev_now: float | None = None
        self._plain_period: dict[int, list] = {}  # log2 batch bucket -> [running mean, periods seen]
        self._probe_meas: _ProbeMeasurement | None = None
        self.probe_loss: dict[int, float] = {}
        self._probe_bucket: int | None = None  # the batch level's log2 bucket at the latest probe
        self._level: float | None = None  # log2 of the batch, averaged over ~20 plans (_level_bucket)
        # The drafter forward runs over the requests that submit drafts only (the proposer's
        # _drafting_rows; not under tensor parallelism, where every rank runs the whole batch).
        self.forward_drafting_rows_only = forward_drafting_rows_only
        # An idle window (``_idle_window``): plain steps to come that stay plain whatever their
        # clocks say, while the batch stays near the optimum's (see ``idle_step``).
        self.idle_left = 0
        # A level probe at batch 1 looks twice (see _choose): the verify count after which the
        # second look is due, or None.
        self._look_again: int | None = None
        # The device's padded matmul width for a row count (``_fill_width``), or None: exact.
        self.width = None
        self._filled = 0  # drafts _fill_width added to this step's plan
        self._last_filled = 0  # ... to the latest plan's (the cost model leaves them out: on_step)
        self._members: tuple | None = None  # (the optimum, the batch, its k) re-derived for other members (_choose)

    # called once per step, at the start of the drafting call
    def on_step(self, now: float, num_tokens: int, num_reqs: int, step_start: float | None,
                gap: float | None = None, overhead: float = 0.0) -> None:
        """This step's time without the drafter forward, over num_tokens verified tokens:
        ``now - step_start`` (the runner's execute_model began at step_start) plus ``gap``,
        the time from the end of the previous drafting call to step_start (output processing
        and scheduling, or the server sitting idle), plus ``overhead``, the previous step's host
        work outside both (its plan; after a K = 0 step, its deferred context copy). A gap above
        3x its running mean counts as idle and is replaced by the mean: a single idle gap of
        seconds, taken for a step, made the cost model believe for hundreds of steps that every
        verified token costs milliseconds."""
        if self.fixed is not None:  # a pinned K needs no cost model: keep its steps cheap
            self.step += 1
            return
        idle = 0.0  # of the time since the previous plan, what the server sat idle
        if step_start is not None:
            rest = now - step_start + max(overhead, 0.0)
            if gap is not None and gap >= 0:
                g = self._gap_mean
                if g is None and gap > rest:  # the first gap may be idle too: wait for a short one
                    idle = gap
                elif g is None or gap <= 3.0 * g:
                    self._gap_mean = gap if g is None else 0.9 * g + 0.1 * gap
                    rest += gap
                else:
                    rest += g
                    idle = gap - g
            cm = self.cost
            # the drafts this step verified: the previous plan's (fewer if the scheduler cut some)
            drafts = min(self._last_submitted, max(num_tokens - num_reqs, 0))
            drafted = drafts > 0
            # The plain-step line learns from runs of plain decode steps only: not the first plain
            # step after drafted ones, not a step with prefill in it (a prompt's first step
            # costs more than its tokens say: 8-12 ms for ~100 tokens on the demo pair).
            transient = not drafted and (self._prev_submitted > 0 or num_tokens > num_reqs)
            if rest > 0:
                # The drafts the plan priced, not those _fill_width added: those cost nothing (the
                # step ran at the same padded widths without them), and counted, they taught the
                # lines that every draft costs less, shallow plans at batch 1 (exact widths up to
                # 8 rows) included: in session 45's first full check with the fill, chat c = 1
                # drafted on 95 steps of 937 (session 44: 54).
                fill = min(self._last_filled, drafts)
                priced, tokens = drafts - fill, num_tokens - fill
                if cm.verify.n >= 8:
                    # Clipped, not dropped: a stall inside the step (a GC pause) counts only up
                    # to `outlier` times the prediction, while a real jump in load (the model
                    # still thinks N is free) is followed within a few steps.
                    # (the prediction from the coefficients as last solved: a solve per step
                    # would cost more than the clip is worth)
                    rest = min(rest, self.outlier * max(float(cm.t_verify(tokens - priced, priced, stale=True)), 1e-6))
                cm.observe_step(rest, tokens, drafts=priced, transient=transient)
        if self._prev_now is not None:
            self._measure_probe(now - self._prev_now - idle, num_reqs)
        self._prev_now = now
        # Prompt tokens that ran alongside: what the next step's plan expects again (N0), a
        # running mean that one step moves by at most twice what it expected plus the batch. A
        # burst of prompts (a cell's 32-64 arrivals at once, 3,000-6,000 tokens) otherwise priced
        # the plain steps after it, which run no prompt, at 100-380 ms against ~25 (the plain
        # line's slope is per decoding request, fitted without prompts), drafting looked cheap
        # next to that, and the policy drafted at g(1) 0.07-0.26 for 4-5 steps. A steady stream
        # of prompts reaches its level within ~10 steps.
        extra = min(max(0, num_tokens - num_reqs - self._last_submitted), 2.0 * self.prefill_tokens + num_reqs)
        self.prefill_tokens = 0.8 * self.prefill_tokens + 0.2 * extra
        self.step += 1

    def _measure_probe(self, period: float, num_reqs: int) -> None:
        """What a probe cost, measured rather than modelled: the wall time from one plan to the
        next (the engine step, the drafting call with its deferred context write, scheduling),
        for the two periods a probe touches (its drafter forward and the verify of its drafts;
        then the first plain step after drafted ones, which costs more) against the running mean
        over periods with no drafts on either side, in plain steps, less the drafts it got
        accepted (a plain step emits one token per request):
        ``loss = (p1 + p2) / P - 2 - accepted / r``. The modelled loss (``_optimum``) prices
        only the verify and the drafter forward; on the demo pair's free prompts it read ~1 plain
        step at batch 1-64 and probes came every ~40-60 steps, while drafter calls alone were
        2.5-4 % of the step time (bench T_d), twice the budget. ``_probe_due`` spaces probes by
        the larger of the two, per log2 batch bucket (a probe at batch 64 runs the drafter over
        64 blocks and costs several plain steps; at batch 1 about one). The plain periods are kept
        per log2 batch bucket too (one mean across batches priced a probe at batch 8, after a
        cell at batch 64, against a 23 ms period where plain steps took 9), and a probe is
        measured only against a bucket with 4 plain periods in it."""
        last, prev = self._last_submitted, self._prev_submitted
        if last == 0 and prev == 0 and period > 0:
            e = self._plain_period.setdefault(CostModel._bucket(num_reqs), [period, 0])
            e[0], e[1] = (period if e[1] == 0 else 0.8 * e[0] + 0.2 * period), e[1] + 1
        m = self._probe_meas
        if m is None:
            return
        if m.first is None and last > 0:  # the probe's own period: its drafter call and its verify
            m.first = period
            return
        self._probe_meas = None
        b = CostModel._bucket(m.batch)
        e = self._plain_period.get(b)
        if m.first is None or last > 0 or e is None or e[1] < 4 or e[0] <= 0:  # drafting went on, or no plain mean
            return
        # The drafts it got accepted, read only now: vLLM 0.32 runs a DFlash drafter before its
        # bookkeeping (gpu_model_runner.sample_tokens), so a plan comes before the verify of the
        # same step is observed, and the probe's verify is seen one plan after its own period.
        # (Until session 21 they were read at that period's plan, i.e. always 0: a probe that
        # got 8 of 8 drafts accepted at batch 1 was measured to lose 5 plain steps instead of
        # none, so the next probe came ~120-250 steps on instead of 32.)
        acc = self.acceptance
        accepted = acc.last_accepted if acc.verified_steps == m.verified + 1 else 0
        loss = max(0.0, (m.first + period) / e[0] - 2.0 - accepted / max(m.batch, 1))
        # A probe measured to lose less than the probes before it is taken at its word (the
        # workload changed: its drafts paid for it), one that loses more is averaged in. Halving
        # the old loss only, probes after a run of prompts the drafter does not know came ~75
        # steps after one that paid for itself (a loss of 3 plain steps left 1.5, spaced at 2 %).
        old = self.probe_loss.get(b)
        self.probe_loss[b] = loss if old is None or loss < old else 0.5 * old + 0.5 * loss

    def on_draft_time(self, seconds: float, block_tokens: int, num_reqs: int) -> None:
        self.cost.observe_draft(seconds, block_tokens, num_reqs)

    def plan(self, req_ids: list[str], is_decode: np.ndarray, can_shorten: bool = True,
             seeded: np.ndarray | None = None, num_decode: int | None = None) -> tuple[np.ndarray, int]:
        """(k [num_reqs] submitted drafts per row, q drafter block drafts; 0 = skip the forward).

        ``is_decode``: the rows that may draft; ``num_decode``: the decoding rows, drafting or
        not (each emits a token per step either way; default: the rows of ``is_decode``).
        Rows in ``seeded`` (requests with their own sampling seed) always submit K from a
        K-draft block: a seed reproduces its output only if the drafts and their number are the
        same run to run, and the adaptive choice depends on timing and on the rest of the batch."""
        num_reqs = len(req_ids)
        k = np.zeros(num_reqs, dtype=np.int64)
        if self.fixed is not None:
            kf = self.fixed[(self.step - 1) % len(self.fixed)]
            k[is_decode] = kf
            q = kf if is_decode.any() else 0
        else:
            if self.idle_left > 0 and can_shorten and (seeded is None or not (seeded & is_decode).any()):
                if self.idle_step(num_reqs, int(np.count_nonzero(is_decode))):
                    return k, 0
            rows = np.flatnonzero(is_decode)
            if not len(rows) and can_shorten and (seeded is None or not (seeded & is_decode).any()):
                self.plan_undraftable(num_reqs)
                return k, 0
            self.acceptance.tick(len(rows))
            self._update_level(num_reqs)
            q = 0
            if len(rows):
                k_dec, q = self._choose([req_ids[i] for i in rows], num_reqs, num_decode)
                k[rows] = k_dec
            if seeded is not None and (seeded := seeded & is_decode).any():
                k[seeded] = self.k_max
                q = self.k_max
            if not can_shorten:  # the drafter forward must be the same on every rank
                q = self.k_max
        if q:
            self.idle_left = 0  # (seeded rows, or tensor parallelism, drafted after all)
        self.steps_since_draft = 0 if q else self.steps_since_draft + 1
        self._prev_submitted, self._last_submitted = self._last_submitted, int(k.sum())
        self._last_filled, self._filled = self._filled, 0
        return k, q

    def plan_undraftable(self, num_reqs: int) -> None:
        """``plan`` for a batch of ``num_reqs`` where no request may draft (every decoding one
        kept no drafter context, or none decodes) and none is seeded: no drafts, the step counted.
        The proposer calls it directly for a dormant batch whose requests all keep no context
        (``DFlashProposer._plan``), with the step's clocks handed over later, as in the idle window
        (which ends here: the steps it counted on are not the ones that pass)."""
        self.idle_left = 0
        self.acceptance.tick(0)
        self._update_level(num_reqs)
        self.steps_since_draft += 1
        self._prev_submitted, self._last_submitted = self._last_submitted, 0
        self._last_filled, self._filled = self._filled, 0

    @property
    def measuring_probe(self) -> bool:
        """A probe's loss is being measured (``_measure_probe``): its steps' clocks are read at once."""
        return self._probe_meas is not None

    def probe_soon(self, num_reqs: int) -> bool:
        """Whether a probe may come within ``PROBE_AHEAD`` steps at a batch of ``num_reqs``: one
        due by then (``_probe_due``), a second look or a surprise waiting for the next plan, or a
        probe being measured. While drafting does not pay (``closes_door``) and none is near, no
        request keeps drafter context (``DFlashProposer._close_door``, ``_close_running``): a
        probe then drafts for requests that arrive once it is near, from their prompt on."""
        c = self._optimum_cache
        if c is None or c.opt is None or self._probe_meas is not None or self._look_again is not None:
            return True
        return self.acceptance.surprised or self._probe_due(c.opt, num_reqs=num_reqs, ahead=self.PROBE_AHEAD)

    def _update_level(self, num_reqs: int) -> None:
        x = math.log2(max(num_reqs, 1))
        self._level = x if self._level is None else self.LEVEL_DECAY * self._level + (1.0 - self.LEVEL_DECAY) * x

    def idle_step(self, num_reqs: int, num_decode: int) -> bool:
        """A step of the idle window (``_idle_window``), for a batch of ``num_reqs`` requests,
        ``num_decode`` of them decoding ones that may draft, none seeded: True, and the step is
        planned (no drafts: what ``plan`` would find, for less host work); False, and the window
        ends, if the batch moved by over a quarter from the optimum's or its level is now 4x
        below the last probe's after ``LEVEL_PROBE_AFTER`` steps without drafts (``_probe_spacing``'s
        rule): ``plan`` then decides. The proposer calls it directly for the steps whose clocks
        it hands the policy later (``on_step`` of each, in order, then this)."""
        c, acc = self._optimum_cache, self.acceptance
        if (self.idle_left <= 0 or acc.verified_steps != c.verified or acc.surprised
                or not (_near(c.batch[0], num_reqs) and _near(len(c.batch[1]), num_decode))):
            self.idle_left = 0  # (a verify: none comes without drafts, but a caller may bring one)
            return False
        level = self.LEVEL_DECAY * self._level + (1.0 - self.LEVEL_DECAY) * math.log2(max(num_reqs, 1))
        if self.steps_since_draft + 1 >= self.LEVEL_PROBE_AFTER and self._level_moved(math.floor(level + 0.5)):
            self.idle_left = 0
            return False
        self._level = level
        self.idle_left -= 1
        self.acceptance.tick(num_decode)
        self.steps_since_draft += 1
        self._prev_submitted, self._last_submitted = self._last_submitted, 0
        self._last_filled = 0
        return True

    def _idle_window(self, c: "_CachedOptimum", num_reqs: int) -> int:
        """After a plan of no drafts that reused or recomputed the "no drafts" optimum ``c``: the
        steps after this one that ``_choose`` would plan alike without reading anything new, as
        long as the batch stays near ``c``'s (``idle_step`` checks that and the level rule): until
        ``IDLE_REPLAN`` steps from the optimum, before the next probe is due at the smallest
        spacing ``_probe_due`` finds for a batch within a quarter of this one, and before the
        drafter forward's last timing near a probe's block ages out (``CostModel.draft_known_near``).
        None while a probe is being measured (its measured loss moves the spacing) or drafts are
        still to be verified (the previous plan's). Nothing in between reads what the steps'
        clocks teach the cost model: every plan comes out the same with and without windows
        (``test_the_idle_window_plans_every_step_as_the_policy_would_without_it``; scratch
        bench/results/s30/scratch/exact_plans.py, 24 simulations, to the last digit)."""
        if self._probe_meas is not None or self._last_submitted or c.opt is None:
            return 0
        a = c.batch[0]  # the batches near it: at most two log2 buckets, those of the ends
        ends = (max(1, -(-4 * a // 5)), 5 * a // 4)
        spacing = min(self._probe_spacing(c.opt, n) for n in ends)
        window = min(spacing - self.steps_since_draft - 2, self.IDLE_REPLAN - (self.step - c.step) - 1)
        for n in ends:
            known = self.cost.draft_known_for(c.opt.probe_block, n)
            if known is not None:
                window = min(window, known - 1)
        return max(0, window)

    def _replan_interval(self, c: "_CachedOptimum") -> int:
        """The steps a settled drafting optimum ``c`` is reused for (``_choose``): ``replan_every``,
        doubled for each recomputation in a row beyond the first that came out settled, up to
        ``REPLAN_BACKOFF`` times (4, 8, 16 steps). The same prices three times running
        mostly stay the same: on the demo pair at batch 1 (code prompts, two steps a request)
        the recomputation every 4 steps was ~0.15 ms a step of ~9 (0.5-0.8 ms each in the
        engine, session 43, ``bench/results/s43/scratch/stale_why.py``). A change of prices
        ends the streak (the next interval is ``replan_every`` again), and so do a move of the
        batch size and a change of workload (``AcceptanceModel.shifts``), which replan at once."""
        return self.replan_every * min(1 << max(c.streak - 1, 0), self.REPLAN_BACKOFF)

    def _choose(self, dec_ids: list[str], num_reqs: int, num_decode: int | None = None) -> tuple[np.ndarray, int]:
        """The optimum, then this step's exploration around it. While the optimum is "no
        drafts", it is recomputed only every ``IDLE_REPLAN`` steps, when the batch size moves by
        over a quarter (a new request in the same place changes only its skill rho, which a probe
        measures first; recomputed at every change of size, the plan took 334 / 445 us per step at
        chat c = 16 / 64 in the engine, 266 / 364 within a quarter, session 30), when drafts were verified (a probe's result), and when the reused estimate says
        a probe is due (the fresh one then decides): measured in the engine (demo pair, free
        prompts), the policy's host work was ~0.3 ms per step at batch 1-8, 6-7 % of a plain
        step, most of it this recomputation (~0.4 ms each, on a third of the steps: every 4
        steps, at each new request, every step from 4 steps before a probe).
        While drafting, every step until its prices come out the same twice running (the cap,
        and the survival threshold within a quarter; ``SETTLE_STEPS`` steps measured), then
        every ``replan_every`` steps or when the batch size moves by over a quarter, whatever
        the verifies in between; in between, requests that joined the batch get their k from
        the optimum's threshold and cap. The computation (~0.3 ms of host work on CPU, ~0.6-0.8
        in the engine: 5-7 % of a drafted step of the demo pair at batch 1, where a fixed K
        pays nothing; since session 47 ~0.13-0.19 ms warm, ~0.4-0.5 in the engine) then moves
        little from one verify to the next (and once its prices came out the same three times
        running, up to ``REPLAN_BACKOFF`` times as seldom:
        ``_replan_interval``; at once after a change of workload), while a plan still moving
        (a start, a change of workload) follows every verify (reused early, a first plan of the
        whole block for 4 steps taught the cost model that drafting costs twice what it does,
        and the policy stopped drafting). Until session 18 any change of the batch's members
        recomputed it: with short requests (code prompts, ~13 tokens) on 128 of 136 drafted
        steps at batch 1, 0.70 ms of policy time per step (0.33 since)."""
        batch, verified = (num_reqs, dec_ids), self.acceptance.verified_steps
        surprised, self.acceptance.surprised = self.acceptance.surprised, False
        c = self._optimum_cache
        members_only = False  # about the same batch, other requests: the cached prices, k re-derived
        if c is None or c.opt is None:
            stale = True
        elif c.drafts:  # about the same batch size, and until the plan settles
            stale = (not _near(c.batch[0], num_reqs) or not _near(len(c.batch[1]), len(dec_ids))
                     or self.step - c.step >= self._replan_interval(c) or not c.streak
                     or c.shifts != self.acceptance.shifts)
            members_only = not stale and c.batch != batch
        else:  # "no drafts": the batch moved by over a quarter, a probe's result, a probe due, every IDLE_REPLAN steps
            stale = (not _near(c.batch[0], num_reqs) or not _near(len(c.batch[1]), len(dec_ids))
                     or c.verified != verified or self.step - c.step >= self.IDLE_REPLAN
                     or self._probe_due(c.opt, num_reqs=num_reqs))
            if not stale and not surprised:  # no probe due (just read): what the rest below would return
                self.idle_left = self._idle_window(c, num_reqs)
                return np.zeros(len(dec_ids), dtype=np.int64), 0
        if stale:
            opt = self._optimum(dec_ids, num_reqs, num_decode)
            drafts = opt is None or (opt.k is not None and opt.g > opt.g0 * (1.0 + self.margin) and opt.k.any())
            # Settled: the same prices twice running (the cap, and the threshold within a
            # quarter: it moves with the batch size, which may differ by as much), whichever
            # requests are in the batch (short requests change it every step or two).
            settled = (c is not None and drafts and c.drafts and self.cost.verify.n >= self.SETTLE_STEPS
                       and opt.cap == c.opt.cap and abs(opt.thr - c.opt.thr) <= 0.25 * c.opt.thr)
            c = self._optimum_cache = _CachedOptimum(batch, self.step, opt, drafts, verified,
                                                     c.streak + 1 if settled else 0, self.acceptance.shifts)
        opt, drafts = c.opt, c.drafts
        r = len(dec_ids)
        if opt is None:  # the very first step: nothing measured, draft everything once
            return np.full(r, self.k_max), self.k_max
        best_k, best_g, g0, q_probe, probe_loss, thr, cap, _ = opt
        if members_only:
            # Requests left and others took their place, or the batch moved by a request or two:
            # the optimum's rule with its prices, for the batch now (see the docstring).
            # Re-derived once per batch of members (it then stays, like the optimum's own k,
            # until the optimum is recomputed): at batch 1, where each new request makes the
            # batch "other members", every step until the recomputation re-derived it (122 of
            # ~200 steps of tasks c = 1, ~0.12 ms each in the engine, session 45).
            m = self._members
            if m is not None and m[0] is c and m[1] == batch:
                best_k = m[2]
            else:
                best_k = np.minimum((self.acceptance.survival(dec_ids) >= thr).sum(axis=1), cap)
                self._members = (c, batch, best_k)
        budget = self.explore_budget
        if drafts:
            # A plain step now and then anchors T_v(N0), at most `budget` of the expected goodput.
            # While plain steps are few (a server that has drafted since it started), one every
            # `zero_every` steps whatever they cost: the plain-step line is what every plan is
            # weighed against, and without it a change to prompts the drafter does not know
            # goes on drafting (see CostModel).
            # An anchor is two plain steps, each short of a drafted step's goodput by 1 - g0 /
            # best_g: spaced by one step's loss (until session 44), anchors cost twice the budget
            # (tasks at batch 1 on the demo pair: a pair every ~50 steps, ~2 % of the drafted
            # output; in the engine more, the first plain step after drafted ones costs more).
            spacing = self.zero_every if self.cost.plain.n < self.PLAIN_ANCHORS else \
                max(self.zero_every, int(2.0 * (1.0 - g0 / best_g) / budget))
            # Two in a row (the second is the plain step's cost: the first after drafted steps
            # costs more). The spacing moves with the optimum from step to step, so the second
            # is taken from a flag, not from the spacing: read off `step % spacing < 2`, most
            # pairs were one step, and no plain step was measured for hundreds of steps (code
            # at batch 64, then chat at batch 1: a 4.5 ms plain step priced at 8-9 ms, drafted on).
            # And as soon as the batch is far (over 4x) from every batch a plain step was recently
            # measured at, at most every COVER_EVERY steps: there the plain-step price is an
            # extrapolation (code at batch 64, then chat at batch 1: priced 5-9 ms against 4.5,
            # and ~150-220 steps drafted on prompts the drafter does not know).
            if (self._anchor_next or self.step % spacing == 0
                    or (self.step - self._last_anchor >= self.COVER_EVERY
                        and not self.cost.plain_known_near(num_reqs))):
                self._anchor_next = not self._anchor_next
                self._last_anchor = self.step
                return np.zeros(r, dtype=np.int64), 0
            k = best_k
            self._look_again = None
            if self.step % self.dither_every == 0:  # +-1 draft now and then: dI/dD stays measured
                k = np.clip(k + (1 if (self.step // self.dither_every) % 2 else -1), 0, self.k_max)
            if k.any():
                return self._fill_width(k, num_reqs)
        # Keep measuring acceptance and draft cost: a probe, as often as `budget` of the step
        # time allows (a probe that loses 6 plain steps waits ~300 steps), and at once after a
        # verify whose accepted run the curve made unlikely (AcceptanceModel.surprised): the
        # second row a change of workload needs comes a step later, not a probe spacing later.
        look = self._look_again is not None and self.acceptance.verified_steps > self._look_again
        if surprised or look or self._probe_due(opt, num_reqs=num_reqs):
            self._probes += 1
            rows = self._probe_rows(dec_ids)
            # A probe the level rule brought (a fall of the load) on a single row looks twice: a
            # change of workload needs two rows (AcceptanceModel's shift_min), and at batch 1 the
            # second came a budgeted spacing (~80 steps) later unless the first one's run surprised.
            self._look_again = (self.acceptance.verified_steps if not (surprised or look) and len(rows) < 2
                                and self._level_moved(self._level_bucket(num_reqs)) else None)
            # The regime the probe measured: the batch's level, or the batch itself where it is
            # lower (a probe the level rule brings while the level is still falling: recorded at
            # the level, the rule fired again at each further 4x of the fall, 3 probes in ~50
            # steps from batch 64 to 1 instead of one;
            # test_a_fall_of_the_load_brings_one_level_probe_not_one_per_4x).
            self._probe_bucket = min(self._level_bucket(num_reqs), CostModel._bucket(num_reqs))
            self._probe_meas = _ProbeMeasurement(num_reqs, self.acceptance.verified_steps)
            if self._probes % 2 == 0:  # every other probe half as deep: N varies among drafted
                q_probe = max(1, q_probe // 2)  # steps (the slope in N told apart from delta), and
                # it still sees past the first draft (a 1-draft probe could not tell a changed workload)
            k = np.zeros(r, dtype=np.int64)
            k[rows] = q_probe
            return k, q_probe
        if not drafts:
            self.idle_left = self._idle_window(c, num_reqs)
        return np.zeros(r, dtype=np.int64), 0

    def _fill_width(self, k: np.ndarray, num_reqs: int) -> tuple[np.ndarray, int]:
        """A drafting plan ``k`` (per decoding row) with the drafts that cost nothing added, and
        its block ``q = max k``. Where the device runs the step's matmuls at padded row counts
        (``width``: on CPU, fixes/cpu_gemm_widths.py's ``bucket``), rows up to the padded width
        are computed either way: the block grows while the drafter's widths stay the same
        (its forward runs R_d (q + 1) rows, its last layer and head R_d q), and the drafting
        rows' k_i grow, deepest first, round-robin, while the verify's N = batch + sum k stays
        within its width. The cost model's lines cannot price a staircase: at batch 1 on the
        demo pair, the policy submitted 11 of a 15-draft block on a third of tasks c = 1's
        steps, while a pinned cycle of 11 and 15 measured the same verify and drafting call for
        both (5.5-6.2 ms and 3.4-3.6 ms; 16 rows either way; session 45,
        ``bench/results/s45/scratch/width_cost.py``). The drafts added are verified like any
        other (the output does not change), and the cost model sees the step as it ran. Not on
        probes: their depth is chosen to tell the slope in N from the fixed cost."""
        w = self.width
        if w is None:
            return k, int(k.max())
        kl = k.tolist()  # (Python ints: ~10 numpy calls on a 1-row plan cost more than the rest of it)
        q = max(kl)
        rows = [i for i, x in enumerate(kl) if x]
        n = len(rows) if self.forward_drafting_rows_only else num_reqs
        top, block, head = q, w(n * (q + 1)), w(n * q)
        while top < self.k_max and w(n * (top + 2)) == block and w(n * (top + 1)) == head:
            top += 1
        total = num_reqs + sum(kl)
        free = w(total) - total
        if free <= 0 or all(kl[i] >= top for i in rows):
            return k, q
        order = sorted(rows, key=lambda i: -kl[i])  # deepest first (stable)
        while free > 0:
            grew = free
            for i in order:
                if kl[i] < top and free > 0:
                    kl[i] += 1
                    free -= 1
            if free == grew:
                break
        self._filled = sum(kl) - int(k.sum())
        return np.array(kl, dtype=k.dtype), max(kl)

    def _probe_rows(self, dec_ids: list[str]) -> np.ndarray:
        """The rows a probe drafts for: all of a batch of up to ``PROBE_ROWS`` requests, else the
        ``PROBE_ROWS`` verified longest ago (requests never verified first: successive probes go
        round the batch; by the least evidence instead, the rows whose drafts are rejected early,
        which gather the least, were the sample every time). A probe asks whether the
        traffic changed; a sample of its requests answers that (the curve is server-wide, the
        workload shift in ``AcceptanceModel.observe`` needs two rows), and a probe of the whole
        batch cost ~2.5 plain steps at batch 64 (the drafter forward and the verify of 64 blocks),
        where dormant adaptive read ~7 % below K = 0 in session 38's full check (tasks c = 64)."""
        r = len(dec_ids)
        if r <= self.PROBE_ROWS:
            return np.arange(r)
        get = self.acceptance.requests.get
        seen = np.array([st[2] if (st := get(rid)) is not None else -1 for rid in dec_ids])
        return np.sort(np.argsort(seen, kind="stable")[:self.PROBE_ROWS])

    @property
    def dormant(self) -> bool:
        """The latest plan's optimum was "no drafts" (probes aside): drafting does not pay now."""
        c = self._optimum_cache
        return self.fixed is None and c is not None and c.opt is not None and not c.drafts

    def closes_door(self, num_reqs: int) -> bool:
        """Requests arriving in a batch of ``num_reqs`` get no drafter context (the proposer's
        ``_close_door``): dormant, unless the optimum was computed at about this batch (within a
        quarter) with the best drafting plan's goodput at ``DOOR_BELOW`` of no drafts or more. A
        request closed at the door never drafts, whatever the policy decides later in its life,
        so the door stays open where not drafting won by a hair at this load: there the optimum
        flips with a step's timing, and the closed requests sat out the drafting that followed.
        In a rotation of the full check's cells (``bench/results/s44/scratch/row_trace.py``, one
        engine, two repeats) the door closed on 2,492 requests of the chat and free cells, all at
        a best drafting goodput of 0.42-0.82 of no drafts, on 23 of tasks c = 64's at 0.87, and
        on 19 of tasks c = 32's at 0.98: there 29 % of the rows of the drafted steps that
        followed could not draft (2,726 tok/s, against 3,046 in the repeat without closures).
        Requests left open while dormant keep their context queued; a long run of steps without
        drafts sheds it (``ContextQueue.shed``). An optimum from another batch (a burst of
        arrivals, a new benchmark cell) says nothing of this one, and there the door closes as
        before. (With the margin alone, the first requests of chat at batch 64 after chat at
        batch 1, where the optimum sits near the margin, all drafted in the simulation of
        ``test_engine_costs_tasks_at_batch_1_after_the_weak_cells_matches_the_best_fixed_k``, and
        tasks at batch 1 after those cells read 0.942 of K = 15 over 30 seeds, against 0.969
        before and with this rule: ``bench/results/s44/scratch/door_seeds.py``.)"""
        if not self.dormant:
            return False
        c = self._optimum_cache
        return not _near(c.batch[0], num_reqs) or c.opt.g < self.DOOR_BELOW * c.opt.g0

    @property
    def optimum(self):
        """The optimum the latest plan used (see ``_optimum``), or None: for tracing."""
        return self._optimum_cache.opt if self._optimum_cache else None

    def _level_bucket(self, num_reqs: int) -> int:
        """The batch's level (a running mean of log2 of the batch, ``LEVEL_DECAY`` per plan: ~20
        steps), rounded, for the "batch 4x below the last probe's" rule (``_probe_due``); both
        sides of that rule read it, so a difference of 2 is a factor of ~4."""
        if self._level is None:
            return CostModel._bucket(num_reqs)
        return math.floor(self._level + 0.5)

    def _level_moved(self, level_bucket: int) -> bool:
        """Whether the batch's level is now 4x or more below the last probe's: a new regime that
        gets a probe after ``LEVEL_PROBE_AFTER`` steps without drafts, whatever the budget says
        (after ``probe_every``, 32, until session 39: ~20-30 plain steps of the bench's ~70-step
        tasks c = 1 cell after free c = 64, which K = 15 drafts through; a probe at batch 1 costs
        about a plain step, and the rule brings one per move of the load). Only below: with the
        same acceptance, drafting pays more at a smaller batch (a draft's share of the verify
        costs less there) and a probe costs less (a drafting call does work for every request of
        the batch, drafting or not), so a move down is where a look is worth its price. A move
        up makes drafting pay less with the same acceptance and a probe cost more; a change of
        traffic that comes with it waits for the budgeted spacing. Both ways (until session 37),
        the rule brought a probe in every benchmark cell after a 4x rise of the load, and the
        cells are short: ~3.5 plain steps lost in 48 at free c = 16 (one probe per cell, scratch
        ``bench/results/s37/scratch/probe_loss.py``), adaptive at 0.93 of K = 0 there over 8
        repeats (``bench/results/s37/weak8.json``)."""
        return self._probe_bucket is not None and level_bucket <= self._probe_bucket - 2

    def _probe_due(self, opt, *, num_reqs: int, ahead: int = 0) -> bool:
        """Whether a probe is due (within ``ahead`` steps; see ``_probe_spacing``)."""
        return self.steps_since_draft + 1 + ahead >= self._probe_spacing(opt, num_reqs)

    def _probe_spacing(self, opt, num_reqs: int) -> int:
        """The steps without drafts after which a probe is due (``_probe_due``): ``probe_every``
        at least, spaced so that what probes lose (in plain steps: ``opt``'s estimate where the
        drafter was timed near a probe's block, or what probes at about this batch size were
        measured to lose, per log2 bucket or else its neighbours, the larger) stays within
        ``probe_budget``."""
        # The modelled loss only where the drafter forward was timed near the probe's block: an
        # extrapolated T_d (blocks timed at batch 64 only) spaced probes at batch 1 ~150 steps
        # apart, and the policy stayed off for 200-530 steps of tasks c = 1 after free c = 64
        # (session 30). A probe there is what measures it.
        loss = opt.probe_loss if opt is not None and self.cost.draft_known_near(opt.probe_block, num_reqs) else 0.0
        b, measured = CostModel._bucket(num_reqs), self.probe_loss
        m = measured.get(b)
        if m is None:  # a batch at the edge of a bucket (7 after 8): its neighbours' measurements
            m = max((measured[x] for x in (b - 1, b + 1) if x in measured), default=None)
        if m is not None:
            loss = max(loss, m)
        spacing = max(self.probe_every, int(loss / self.probe_budget))
        # A batch 4x below the last probe's: a new regime gets a look soon (_level_moved). Read as
        # the batch's level, not this step's batch: a benchmark cell's drain and the next cell's
        # arrivals pass through batches 4x away within a few steps, and with the batch itself this
        # rule brought a probe in nearly every short cell of prompts the drafter does not know
        # (session 29).
        if self._level_moved(self._level_bucket(num_reqs)):
            spacing = min(spacing, self.LEVEL_PROBE_AFTER)
        return spacing

    def _optimum(self, dec_ids: list[str], num_reqs: int, num_decode: int | None = None):
        """The optimum for this batch (``_Optimum``), or None before anything was measured;
        ``num_decode``: the decoding requests, those in ``dec_ids`` and those that cannot draft."""
        r = len(dec_ids)
        cm = self.cost
        if not cm.ready:
            return None
        # The decoding requests that cannot draft (closed at the door: the proposer's
        # _close_door) emit their token per step whatever the plan: in the goodput, not in the
        # choice. Left out, 4 sentinels of a batch of 64 were priced as if their accepted drafts
        # were a batch's worth of tokens: drafting for them looked worth a drafter call and a
        # speculative step (simulation with the door, session 33: the weak cells' second chat
        # c = 64 cell drafted on 9 of 50 steps, 22 with the drafting call priced in its batch).
        e0 = float(max(num_decode or 0, r))
        s = self.acceptance.survival(dec_ids)  # [r, K]
        cs = np.concatenate([np.zeros((r, 1)), np.cumsum(s, axis=1)], axis=1)  # cs[i, k] = sum_{j<=k} s_i(j)
        caps = self.caps
        n0 = num_reqs + self.prefill_tokens
        t0 = float(cm.t_verify(n0))
        g0 = e0 / max(t0, 1e-9)
        # The drafter forward over the requests that draft (or the whole batch), one block each.
        subset = self.forward_drafting_rows_only
        # The prices of the ~11 plans a round weighs, in Python floats (CostModel.increment_at
        # and draft_at): the same values as t_verify and t_draft on arrays, for
        # about half the host time of this method (session 47, bench/results/s47/scratch/
        # optimum_bench.py; the same optima to the last digit, scratch optimum_same.py).
        increment, t_draft, cap_list = cm.increment_at(n0), cm.draft_at(num_reqs), caps.tolist()
        # every decoding request drafts (or the whole batch runs the forward)
        t_draft_all = [t_draft((r if subset else num_reqs) * (cp + 1)) for cp in cap_list]
        # A step that verifies drafts is priced as the plain step it extends (t0, with the plain
        # line's local error) plus delta plus what its drafts add (CostModel): never below t0 +
        # delta. (Until session 19 the drafted plan was priced from the lines at N0 + sum k,
        # without that local error: after slow plain steps it came out below the plain step, in
        # the engine 9.8-25 ms plain against 8.4-15 ms drafted at batch 1-28, g(1) 0.1-0.35, and
        # the policy drafted on prompts the drafter does not know.)
        rows = np.arange(r)[None, :]
        lam, n_est = g0, n0 + self._last_submitted - self._last_filled
        best_g, best_k, best_c, best_thr = 0.0, None, 0, 0.0
        for _ in range(3):  # Dinkelbach on G = E / T
            thr = lam * cm.slope_verify(n_est)
            k_free = (s >= thr).sum(axis=1)  # s_i decreasing in j: the accepted set is a prefix
            kc = np.minimum(k_free[None, :], caps[:, None])  # [C, r]
            gain = (e0 + cs[rows, kc].sum(axis=1)).tolist()
            d_tot = kc.sum(axis=1).tolist()
            t_d = ([t_draft(x * (cp + 1)) for x, cp in zip(np.count_nonzero(kc, axis=1).tolist(), cap_list)]
                   if subset else t_draft_all)
            g = [gn / max(t0 + increment(d) + td, 1e-9) for gn, d, td in zip(gain, d_tot, t_d)]
            c = max(range(len(g)), key=g.__getitem__)  # (the first of equals, as np.argmax)
            if g[c] > best_g:
                best_g, best_k, best_c, best_thr = g[c], kc[c], c, float(thr)
            if abs(g[c] - lam) <= 1e-4 * lam:
                break
            lam, n_est = g[c], float(n0 + d_tot[c])
        # A probe (while drafting does not pay) drafts as deep as costs at most a quarter of a
        # plain step more than one draft each: on a device with idle compute that is the whole
        # block, and one probe then measures every position's acceptance, not only the first.
        # (For PROBE_ROWS of a larger batch: _probe_rows.)
        rp = min(r, self.PROBE_ROWS)
        t_probe_draft = t_draft_all if rp == r or not subset else [t_draft(rp * (cp + 1)) for cp in cap_list]
        t_caps = [t0 + increment(rp * cp) + td for cp, td in zip(cap_list, t_probe_draft)]
        lim = t_caps[0] + 0.25 * t0
        i_probe = max(i for i, t in enumerate(t_caps) if t <= lim)
        q_probe = cap_list[i_probe]
        # What a probe loses against a plain step, in plain steps (its accepted drafts count).
        loss = t_caps[i_probe] / max(t0, 1e-9) - (e0 + rp * float(cs[:, q_probe].mean())) / e0
        return _Optimum(best_k, best_g, g0, q_probe, loss, best_thr, cap_list[best_c],
                        float((rp if subset else num_reqs) * (q_probe + 1)))
