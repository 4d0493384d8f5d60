"""Smoke run of `dflash-vllm bench --quick` (shrunk further): every method runs, the numbers hold
together (eq. 2, histogram totals, greedy identity), the plots and `compare`/`table` work."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    cmd = [sys.executable, "-m", "dflash_vllm.cli", "bench", "--quick", "--concurrency", "1,4", "--min-requests", "6",
           "--max-tokens", "48", "--grid-sets", "code", "--ballast-gib", "0.25", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return out, json.loads(out.read_text()), proc.stdout


def test_every_method_and_cell_present(result):
    _, r, _ = result
    assert list(r["methods"]) == ["none", "ours", "native", "ngram"]
    keys = {(c["prompt_set"], c["concurrency"], c["method"]) for c in r["cells"]}
    want = {(ps, c, m) for m in r["methods"] for ps, c in [("tasks", 1), ("tasks", 4), ("code", 1)]}
    assert keys == want
    for k in ("git_commit", "vllm", "torch", "machine", "time"):
        assert r["provenance"][k]
    assert r["ballast_bytes"] == 2**28  # --ballast-gib 0.25: held while the engines ran (CPU)


def test_greedy_outputs_identical_across_methods(result):
    _, r, _ = result
    for c in r["cells"]:
        if c["method"] != "none":
            assert c["identical_to_no_spec"] == 1.0, c


def test_acceptance_numbers_hold_together(result):
    _, r, _ = result
    for c in r["cells"]:
        if c["method"] == "none":
            assert "tau" not in c and "speedup" not in c
            continue
        k = r["methods"][c["method"]]["speculative_config"]["num_speculative_tokens"]
        hist, surv = c["accepted_hist"], c["prefix_survival"]
        assert len(hist) == k + 1 and sum(hist) == c["verify_steps"] > 0
        assert len(surv) == k and all(a >= b for a, b in zip(surv, surv[1:])) and surv[0] <= 1
        assert c["tau"] == pytest.approx(1 + sum(surv), abs=2e-3)  # eq. (2)
        assert c["speedup"] > 0 and c["eq4"]["predicted_speedup"] > 0
        assert c["step_ms"]["T_d"] > 0 and c["step_ms"]["T_v"] > 0
    ours = [c for c in r["cells"] if c["method"] == "ours"]
    assert min(c["tau"] for c in ours) > 3.0  # the demo drafter drafts well (tau ~7 at K=15)
    mem = r["methods"]["ours"]["memory"]
    assert mem["drafter_weight_bytes"] > 1e6 and 0 < mem["drafter_kv_bytes"] < mem["target_kv_bytes"]
    assert r["methods"]["none"]["memory"]["drafter_kv_bytes"] == 0


def test_plots_and_tables(result):
    out, r, stdout = result
    for suffix in ("_speedup.png", "_acceptance.png", "_time_split.png"):
        p = str(out).removesuffix(".json") + suffix
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        assert os.path.getsize(p) > 10_000
    assert "Table 1 style" in stdout and "Table 3 style" in stdout
    cmp = subprocess.run([sys.executable, "-m", "dflash_vllm.cli", "bench", "compare", str(out), str(out)],
                         capture_output=True, text=True, timeout=60)
    assert cmp.returncode == 0
    rows = [ln for ln in cmp.stdout.splitlines() if ln.startswith("| tasks")]
    assert len(rows) == 2 * len(r["methods"]) and all("(1.000)" in ln for ln in rows)
