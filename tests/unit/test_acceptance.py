"""tau, its histogram and prefix survival on hand-counted inputs, the empty cases each caller relies
on, and two callers wired to them (the bench report and the reference loop's Result)."""

import math

import pytest

from dflash_vllm.acceptance import histogram, prefix_survival, tau, tau_from_counters

pytestmark = pytest.mark.unit

ACC = [0, 2, 3, 1, 3]  # K = 3: one step each accepted 0, 1, 2 drafts, two accepted all 3


def test_tau_histogram_survival_known_values():
    assert tau(ACC) == pytest.approx(1 + 9 / 5)
    assert histogram(ACC, 3) == [1, 1, 1, 2]
    assert prefix_survival(ACC, 3) == pytest.approx([4 / 5, 3 / 5, 2 / 5])
    assert 1 + sum(prefix_survival(ACC, 3)) == pytest.approx(tau(ACC))  # eq. 2: the two definitions agree


def test_counts_above_k_land_in_the_last_bin():
    assert histogram([0, 5, 7], 3) == [1, 0, 0, 2]
    assert prefix_survival([0, 5, 7], 3) == pytest.approx([2 / 3, 2 / 3, 2 / 3])


def test_tau_from_counters():
    assert tau_from_counters(30, 10) == pytest.approx(4.0)
    assert tau_from_counters(30.0, 10.0, empty=0.0) == pytest.approx(4.0)
    assert tau_from_counters(0, 10) == 1.0  # drafted, nothing accepted: a real tau of 1


def test_empty():
    assert math.isnan(tau([]))
    assert tau([], empty=1.0) == 1.0
    assert tau_from_counters(5, 0) is None  # gpu_check: "-" in its table
    assert tau_from_counters(0.0, 0.0, empty=0.0) == 0.0  # the /metrics gauge before any draft
    assert math.isnan(tau_from_counters(0, 0, empty=float("nan")))  # the demo's per-family tau
    assert histogram([], 2) == [0, 0, 0]
    assert len(prefix_survival([], 2)) == 2 and all(math.isnan(x) for x in prefix_survival([], 2))


def test_report_summarize_uses_them():
    from dflash_vllm.bench.report import summarize

    run = {"steps": [{"new_tokens": 14, "seconds": 0.1, "running": 1}], "wall_s": 1.0, "itl_s": [0.1],
           "outputs": [{"accepted_per_step": ACC, "e2e_s": 1.0, "ttft_s": 0.1, "token_ids": list(range(14))}]}
    s = summarize([run], k=3)
    assert (s["tau"], s["verify_steps"], s["accepted_hist"], s["prefix_survival"]) == (2.8, 5, [1, 1, 1, 2], [0.8, 0.6, 0.4])
    assert "tau" not in summarize([run], k=None)


def test_report_summarize_keeps_the_submitted_k_of_each_repeat():
    """Pooled, one repeat that stopped drafting (more steps) outweighs two that drafted deep."""
    from dflash_vllm.bench.report import summarize

    def run(hist):
        return {"steps": [{"new_tokens": 1, "seconds": 0.1, "running": 1}], "wall_s": 1.0, "itl_s": [],
                "outputs": [], "submitted_hist": hist}

    s = summarize([run([0, 0, 10]), run([0, 0, 10]), run([60, 0, 0])], k=2)
    assert s["mean_submitted_k"] == pytest.approx(0.5) and s["mean_submitted_k_per_repeat"] == [2.0, 2.0, 0.0]


def test_reference_result_tau():
    from dflash_vllm.reference import Result

    assert Result([1, 2], accepted=ACC).tau == pytest.approx(2.8)
    assert Result([1], accepted=[]).tau == 1.0  # no verify step yet: one token per step
