"""Bad starts of `dflash-vllm serve` end in one line and exit status 2, before any engine starts;
a server whose engine dies exits non-zero, so a supervisor restarts it."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from dflash_vllm.demo import Server

pytestmark = pytest.mark.e2e


def _serve(target, spec, timeout=120):
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "dflash_vllm.cli", "serve", target, "--speculative-config", json.dumps(spec),
         "--skip-tokenizer-init", "--dtype", "float32", "--host", "127.0.0.1"],
        capture_output=True, text=True, timeout=timeout,
    )
    return proc, time.perf_counter() - t


def _truncated_drafter(tiny_dir, tmp_path):
    d = tmp_path / "drafter"
    shutil.copytree(tiny_dir / "drafter", d)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 3])
    return str(d)


@pytest.mark.parametrize(
    "case, edit, match",
    [
        ("truncated weights", None, "cannot be read"),
        ("method typo", {"method": "dflsh"}, "did you mean 'dflash'"),
        # Each case starts a server (~15 s); the messages themselves are also covered without
        # one in tests/unit/test_config_errors.py, so these three run with `-m slow` only.
        pytest.param("zero drafts", {"num_speculative_tokens": 0}, "num_speculative_tokens=0",
                     marks=pytest.mark.slow),
        pytest.param("negative drafts", {"num_speculative_tokens": -1}, "num_speculative_tokens=-1",
                     marks=pytest.mark.slow),
        pytest.param("unknown draft sampler", {"draft_sample_method": "probablistic"},
                     "draft_sample_method='probablistic'", marks=pytest.mark.slow),
    ],
)
def test_bad_start_is_one_line_and_exit_2(tiny_dir, tmp_path, case, edit, match):
    spec = {"method": "dflash", "model": str(tiny_dir / "drafter"), "num_speculative_tokens": 3}
    if edit is None:
        spec["model"] = _truncated_drafter(tiny_dir, tmp_path)
    else:
        spec.update(edit)
    proc, seconds = _serve(str(tiny_dir / "target"), spec)
    assert proc.returncode == 2, f"{case}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    lines = proc.stderr.strip().splitlines()
    last = lines[-1]
    assert last.startswith("dflash-vllm: error: ") and match in last, f"{case}: {last}"
    assert len(lines) == 1, f"{case}: {len(lines)} lines on stderr: {lines[:3]}"
    assert "Traceback" not in proc.stderr and "EngineCore" not in proc.stderr + proc.stdout, case
    print(f"{case}: exit 2 after {seconds:.1f} s: {last}")
    assert seconds < 60, f"{case}: took {seconds:.0f} s"


def test_serve_exits_nonzero_when_the_engine_dies(tiny_dir):
    spec = {"method": "dflash", "model": str(tiny_dir / "drafter"), "num_speculative_tokens": 3}
    with Server(str(tiny_dir / "target"), spec, extra=["--skip-tokenizer-init"]) as srv:
        engines = [p for p in psutil.Process(srv.proc.pid).children(recursive=True)
                   if "EngineCore" in " ".join([p.name(), *p.cmdline()])]
        assert engines, "no engine-core process found"
        os.kill(engines[0].pid, signal.SIGKILL)
        try:
            rc = srv.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("the server kept running after its engine died")
        tail = srv.tail()
    assert rc == 1, f"exit status {rc}\n{tail[-3000:]}"
    assert "dflash-vllm: error: the engine died" in tail, tail[-2000:]


@pytest.mark.slow  # 2+ minutes; the crash it opens with has its own test (test_seeded_chunked_prefill.py)
def test_short_soak_mixed_load_no_errors_no_mismatches(tmp_path):
    """`dflash-vllm soak` in miniature: greedy/sampled/seeded/streaming/cancelled requests against
    a DFlash and a no-speculation server, opening with the seeded long-prompt burst that used to
    kill the engine (the full 30-minute run is documented in bench/README.md)."""
    from dflash_vllm.soak import DEMO_DRAFTER, DEMO_TARGET, run

    res = run(DEMO_TARGET, DEMO_DRAFTER, 15, minutes=0.5, concurrency=8, log_dir=str(tmp_path))
    for name, s in res["servers"].items():
        assert s["errors"] == 0 and s["alive_at_end"], (name, s["error_samples"])
        assert s["by_kind"].get("seed_burst") == 12 and s["by_kind"].get("cancelled", 0) > 0, (name, s["by_kind"])
        assert s["greedy_repeat_mismatches"] == 0, name
    assert res["greedy_compared"] > 0 and res["greedy_mismatches"] == 0, res["mismatch_samples"]
