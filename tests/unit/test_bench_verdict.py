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


def test_best_fixed_k_picked_on_other_repeats_is_free_of_the_choice_bias():
    """Three fixed K equally fast, each with one lucky repeat (+30 %, this VM's noise), and a
    policy exactly as fast as each: "the best fixed K of the cell" (highest pooled mean, judged
    on the same repeats) reads the policy at 0.91; against the K picked on the other repeats it
    reads 1.0."""
    def cell(method, per):
        return {"prompt_set": "tasks", "concurrency": 4, "method": method, "output_tokens_per_s": sum(per) / len(per),
                "tokens_per_s_per_repeat": per}

    result = {"cells": [cell("none", [50, 50, 50]), cell("ours@adaptive", [100, 100, 100]),
                        cell("ours@k=3", [130, 100, 100]), cell("ours@k=7", [100, 130, 100]),
                        cell("ours@k=15", [100, 100, 130])]}
    (row,) = adaptive_check(result)
    assert row["vs_best_fixed"] == pytest.approx(0.909, abs=0.01)  # arithmetic means: 110 each
    assert row["vs_best_fixed_held_out"] == pytest.approx(1.0)
    # and it still sees a policy that is slower than every fixed K
    result["cells"][1] = cell("ours@adaptive", [80, 80, 80])
    (row,) = adaptive_check(result)
    assert row["vs_best_fixed_held_out"] == pytest.approx(0.8)


def test_a_replica_is_its_methods_configuration_in_another_process_and_no_fixed_k_candidate():
    from types import SimpleNamespace

    from dflash_vllm.bench.runner import method_configs, parse_methods

    assert parse_methods("none,none#2,ours@k=0,3,ours@k=3#2") == ["none", "none#2", "ours@k=0", "ours@k=3", "ours@k=3#2"]
    for bad in ("none#1", "none#x", "#2", "ours@k=a#2"):
        with pytest.raises(SystemExit, match="bench: bad method"):
            parse_methods(bad)
    args = SimpleNamespace(drafter="D", k=15, draft_sample_method=None, ngram_k=4, eagle3=None,
                           methods="ours@k=3#2,none#2")
    table = method_configs(args)
    assert list(table) == ["none", "ours@k=3#2", "none#2"]
    assert table["ours@k=3#2"]["speculative_config"]["dflash_fixed_k"] == 3
    assert table["none#2"] == table["none"]
    with pytest.raises(SystemExit, match="unknown method"):
        method_configs(SimpleNamespace(**{**vars(args), "methods": "nope#2"}))

    def cell(method, per):
        return {"prompt_set": "chat", "concurrency": 1, "method": method, "output_tokens_per_s": sum(per) / len(per),
                "tokens_per_s_per_repeat": per}

    result = {"cells": [cell("none", [100] * 3), cell("ours@adaptive", [100] * 3), cell("ours@k=0", [90] * 3),
                        cell("ours@k=0#2", [130] * 3)]}
    (row,) = adaptive_check(result)
    assert row["best_fixed"] == "ours@k=0"


def test_context_sweep_length_growth_is_longest_over_shortest_context_per_method_and_batch():
    from dflash_vllm.bench.context_sweep import length_growth

    cells = {f"ctx{c}_b{b}": {m: {"draft_ms": base * (1 + c / 1024) * b} for m, base in (("ours", 2.0), ("native", 3.0))}
             for c in (256, 2048, 8192) for b in (1, 8)}
    g = length_growth(cells, ["ours", "native"], [2048, 256, 8192], [1, 8])
    want = (1 + 8192 / 1024) / (1 + 256 / 1024)
    assert set(g) == {"ours", "native"} and set(g["ours"]) == {"1", "8"}
    assert all(abs(g[m][b] - round(want, 3)) < 1e-9 for m in g for b in g[m])
    assert length_growth(cells, ["ours"], [256], [1]) == {}  # one context: nothing to grow from


def test_replica_control_reads_each_none_replica_against_none_per_cell():
    from dflash_vllm.bench.report import adaptive_tables, replica_control

    def cell(method, ps, conc, tps):
        return {"prompt_set": ps, "concurrency": conc, "method": method, "output_tokens_per_s": tps,
                "tokens_per_s_per_repeat": [tps, tps]}

    cells = [cell("none", "chat", 1, 100.0), cell("none#2", "chat", 1, 90.0), cell("none#3", "chat", 1, 110.0),
             cell("none", "free", 8, 200.0), cell("none#2", "free", 8, 198.0), cell("none#3", "free", 8, 250.0),
             cell("ours@adaptive", "chat", 1, 95.0), cell("ours@adaptive", "free", 8, 190.0)]
    aa = replica_control({"cells": cells})
    assert aa["replicas"] == ["none#2", "none#3"] and aa["cells"] == 4
    assert aa["below_goal"] == 1 and aa["range"] == [0.9, 1.25]  # only 90 / 100 is below 0.97
    assert any(line.startswith("A/A control: none#2, none#3") and "1 of 4 replica cells below 0.97" in line
               for line in adaptive_tables({"cells": cells}))
    assert replica_control({"cells": [c for c in cells if "#" not in c["method"]]}) is None


def test_ballast_is_written_and_held_and_zero_means_none():
    """The bench's ballast (runner.hold_ballast): the size asked for, every page written (so it is
    backed before the engines start, not when first touched), and nothing for 0."""
    from dflash_vllm.bench.runner import hold_ballast

    assert hold_ballast(0) is None
    b = hold_ballast(1 / 1024)  # 1 MiB
    assert len(b) == 2**20
    assert b.count(1) == 2**20 // 4096 and all(b[i] == 1 for i in range(0, 2**20, 4096))


def test_default_ballast_is_a_third_of_the_memory_at_most_8_gib_and_leaves_the_engines_room():
    from dflash_vllm.bench.runner import auto_ballast_bytes

    gib = 1 << 30
    assert auto_ballast_bytes(23 * gib, 8, gib // 2) == 23 * gib // 3  # the session-49 machine: ~7.7 GiB
    assert auto_ballast_bytes(64 * gib, 2, gib // 2) == 8 * gib  # capped
    # 14 GiB free and 8 engines of 1.5 GiB each: nothing to spare, so no ballast at all
    assert auto_ballast_bytes(14 * gib, 8, gib // 2) == 0
    # room left after the engines and 2 GiB, below a third
    assert auto_ballast_bytes(12 * gib, 4, gib // 2) == 4 * gib
    assert auto_ballast_bytes(0, 1, 0) == 0
