"""Mean acceptance length tau and the statistics around it, in one place so every report,
benchmark and gauge computes the same number.

Notation as in bench/report.py (eq. 2): A = accepted drafts in one verify step of one request
(0..K), and tau = 1 + E[A] = 1 + sum_{k=1..K} P(A >= k): a verify step emits its accepted drafts
plus one token of the target's own. Two sources feed it: per-step counts (the harness's
``accepted_per_step``, the reference loop) and running totals (vLLM's Prometheus counters, where
one "draft" is one request's verify step). What "nothing verified" reads as is each caller's
choice (``empty``): a report wants nan or None, the /metrics gauge 0.0, a per-request summary 1.0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def tau(accepted_per_step: Sequence[int], empty: float = math.nan) -> float:
    """1 + mean accepted drafts per verify step; `empty` when there was no verify step."""
    n = len(accepted_per_step)
    return 1 + sum(accepted_per_step) / n if n else empty


def tau_from_counters(accepted_tokens: float, drafts: float, empty: float | None = None) -> float | None:
    """1 + accepted / drafts from totals (or deltas) of ``vllm:spec_decode_num_accepted_tokens_total``
    and ``vllm:spec_decode_num_drafts_total``, or any accepted-drafts / verify-steps pair; `empty`
    when nothing was drafted (a counter delta of 0 is "not measured", not tau = 1)."""
    return 1 + accepted_tokens / drafts if drafts else empty


def histogram(accepted_per_step: Iterable[int], k: int) -> list[int]:
    """hist[j] = verify steps that accepted exactly j drafts, j = 0..k. A count above k goes to
    hist[k] (a step never accepts more than it drafted), so sum(hist) is always the step count."""
    hist = [0] * (k + 1)
    for a in accepted_per_step:
        hist[min(a, k)] += 1
    return hist


def prefix_survival(accepted_per_step: Iterable[int], k: int) -> list[float]:
    """P(A >= j) for j = 1..k: the share of verify steps whose first j drafts all survived (eq. 2;
    with k = K, tau = 1 + their sum). nan at every j when there was no verify step."""
    hist = histogram(accepted_per_step, k)
    n = sum(hist)
    return [sum(hist[j:]) / n if n else math.nan for j in range(1, k + 1)]
