"""The demo from a built wheel in a fresh virtual environment, run outside the checkout: the
package carries the demo pair and finds it without the source tree (issue #14)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

pytestmark = pytest.mark.e2e
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _sources(dest) -> str:
    """What a wheel is built from, copied without the checkout's build/ and egg-info: setuptools
    reuses build/lib, whose leftovers would hide a file the package no longer declares."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(REPO, name), dest / name)
    shutil.copytree(os.path.join(REPO, "dflash_vllm"), dest / "dflash_vllm",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return str(dest)


def test_demo_runs_from_a_wheel(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(wheels), _sources(tmp_path / "src")], check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("dflash_vllm-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # The heavy dependencies (torch, vLLM) come from this environment, after the venv's own
    # packages: a .pth line appends a path without running that directory's own .pth files,
    # so the checkout's editable install stays inactive there.
    with open(os.path.join(site, "deps.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    where = subprocess.run([str(py), "-c", "import dflash_vllm, dflash_vllm.paths as p; print(dflash_vllm.__file__); "
                            "print(p.REPO)"], check=True, capture_output=True, text=True, cwd=tmp_path).stdout.split()
    assert where[0].startswith(site) and where[1] == "None", where  # the wheel's copy, no checkout

    out = tmp_path / "demo.json"
    r = subprocess.run([str(venv / "bin" / "dflash-vllm"), "demo", "--num-prompts", "2", "--max-tokens", "24",
                        "--show", "1", "--json", str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["pair"] == "tasks" and result["target"].startswith(site)
    assert result["identical_outputs"] == 2 and result["tau"] > 1.0, result
