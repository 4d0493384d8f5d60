"""The bench's per-cell verdict on a goal ratio from paired repeats (dflash_vllm/bench/report.py)."""

import pytest

from dflash_vllm.bench.report import adaptive_check, ratio_verdict

pytestmark = pytest.mark.unit


def test_clear_cases_and_noise():
    assert ratio_verdict([110, 111, 109], [100, 100, 100], 0.97)["verdict"] == "meets"
    assert ratio_verdict([80, 81, 79], [100, 100, 100], 0.97)["verdict"] == "misses"
    noisy = ratio_verdict([120, 85, 100], [100, 100, 100], 0.97)  # ~17 % per repeat, as on this VM
    assert noisy["verdict"] == "undecided" and noisy["interval_90"][0] < 0.97 < noisy["interval_90"][1]
    assert ratio_verdict([100], [100], 0.97) is None  # one repeat: no spread to judge by


def test_pairs_repeats_in_order():
    # a drift that hits both methods alike (repeat 2 is slow for both) cancels in the paired ratio
    assert ratio_verdict([100, 50, 100], [98, 49, 98], 0.97)["verdict"] == "meets"


def test_adaptive_check_reports_both_verdicts():
    def cell(method, per):
        return {"prompt_set": "free", "concurrency": 4, "method": method, "output_tokens_per_s": sum(per) / len(per),
                "tokens_per_s_per_repeat": per}

    result = {"cells": [cell("none", [100, 100, 100]), cell("ours@adaptive", [99, 101, 100]),
                        cell("ours@k=0", [100, 99, 101]), cell("ours@k=3", [70, 72, 71])]}
    (row,) = adaptive_check(result)
    assert row["best_fixed"] == "ours@k=0"
    assert row["vs_none_repeats"]["verdict"] == "meets" and row["vs_best_fixed_repeats"]["verdict"] == "meets"
