"""fixes/cpu_onednn_cache.py: the capacity default, who wins, and the memory it bounds."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dflash_vllm import envs
from dflash_vllm.fixes import cpu_onednn_cache

pytestmark = pytest.mark.unit


def test_default_set_only_when_the_user_has_none(monkeypatch):
    monkeypatch.delenv(envs.ONEDNN_CACHE.name, raising=False)
    assert cpu_onednn_cache.install() is True
    assert os.environ[envs.ONEDNN_CACHE.name] == str(cpu_onednn_cache.CAPACITY)
    monkeypatch.setenv(envs.ONEDNN_CACHE.name, "1024")
    assert cpu_onednn_cache.install() is False
    assert os.environ[envs.ONEDNN_CACHE.name] == "1024"


def test_plugin_sets_it_when_vllm_ops_load():
    """In a fresh process: nothing set until vllm._custom_ops is imported, then 64, before any
    primitive exists (oneDNN reads it at its first primitive)."""
    code = ("import os\nfrom dflash_vllm import _plugin\n_plugin.register()\n"
            "print(os.environ.get('ONEDNN_PRIMITIVE_CACHE_CAPACITY'))\n"
            "import vllm._custom_ops\nprint(os.environ.get('ONEDNN_PRIMITIVE_CACHE_CAPACITY'))\n")
    env = {k: v for k, v in os.environ.items() if k not in (envs.ONEDNN_CACHE.name, envs.NATIVE.name)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[-2:] == ["None", str(cpu_onednn_cache.CAPACITY)], out.stdout


@pytest.mark.slow  # ~1 min; `dflash-vllm bench onednn-cache` is the full-size reproduction
def test_bounded_cache_holds_less_memory():
    """The reproduction at small scale: oneDNN's default cache keeps growing with distinct
    batch sizes; at the add-on's capacity the same load holds far less."""
    from dflash_vllm.bench import onednn_cache

    default = onednn_cache.run(None, layers=8, m_step=4, passes=2)
    bounded = onednn_cache.run(str(cpu_onednn_cache.CAPACITY), layers=8, m_step=4, passes=2)
    assert default[-1]["rss_growth_mib"] > 2 * bounded[-1]["rss_growth_mib"] + 50, (default, bounded)
