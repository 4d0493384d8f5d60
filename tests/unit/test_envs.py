"""One table for the environment: every DFLASH_VLLM_* name the code or docs use is in envs.FLAGS,
read and written only through envs, and listed in the README."""

import pathlib
import re

import pytest

from dflash_vllm import envs

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAME = re.compile(r"DFLASH_VLLM_[A-Z0-9_]+")


def _sources():
    for d in ("dflash_vllm", "bench", "tests", "deploy"):
        for p in (ROOT / d).rglob("*"):
            if p.suffix in (".py", ".sh", ".md") and "__pycache__" not in p.parts:
                yield p
    yield ROOT / "README.md"


def test_every_name_used_is_in_the_table():
    known = {f.name for f in envs.FLAGS}
    unknown = {f"{p.relative_to(ROOT)}: {m}" for p in _sources() for m in NAME.findall(p.read_text()) if m not in known}
    assert not unknown, sorted(unknown)


def test_only_envs_touches_the_environment_by_flag_name():
    pattern = re.compile(r"environ[^\n]*(DFLASH_VLLM_|_ENV\b|ONEDNN_PRIMITIVE)")
    offenders = []
    for p in (ROOT / "dflash_vllm").rglob("*.py"):
        if p.name == "envs.py":
            continue
        offenders += [f"{p.relative_to(ROOT)}: {line.strip()}" for line in p.read_text().splitlines() if pattern.search(line)]
    assert not offenders, offenders


def test_readme_lists_every_flag():
    readme = (ROOT / "README.md").read_text()
    assert [f.name for f in envs.FLAGS if f"`{f.name}`" not in readme] == []


@pytest.mark.parametrize("raw, on", [(None, None), ("", None), ("  ", None), ("0", False), ("false", False),
                                     ("no", False), ("1", True), ("yes", True)])
def test_unset_or_empty_means_the_default(monkeypatch, raw, on):
    for flag, default_on in ((envs.NATIVE, False), (envs.STEP_METRICS, True)):
        if raw is None:
            monkeypatch.delenv(flag.name, raising=False)
        else:
            monkeypatch.setenv(flag.name, raw)
        assert envs.enabled(flag) is (default_on if on is None else on)


def test_set_and_unset(monkeypatch):
    monkeypatch.delenv(envs.FIXED_K.name, raising=False)
    assert envs.value(envs.FIXED_K) == "" and not envs.is_set(envs.FIXED_K)
    envs.set(envs.FIXED_K, 3)
    assert envs.value(envs.FIXED_K) == "3" and envs.is_set(envs.FIXED_K)
    envs.unset(envs.FIXED_K)
    assert not envs.is_set(envs.FIXED_K)
