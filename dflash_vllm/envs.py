"""Every environment variable the add-on reads or sets, in one table (as vLLM's ``envs.py``).

Unset or empty means the default. A switch is on unless its value is 0, false or no. Modules
read them through ``value``/``enabled`` and write them through ``set``/``unset``, never
``os.environ`` by name: ``tests/unit/test_envs.py`` fails on a ``DFLASH_VLLM_*`` name that is
not in this table, and on one the README does not list.

Most of them travel into the engine processes: vLLM's engine core and workers inherit the
environment, and the add-on loads in each of them (``runner_choice.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    name: str
    default: str
    help: str


NATIVE = Flag("DFLASH_VLLM_NATIVE", "0",
              "1: the add-on stands aside and vLLM's built-in DFlash serves the same weights (A/B runs)")
NO_SEED_FIX = Flag("DFLASH_VLLM_NO_SEED_FIX", "0",
                   "1: leave vLLM's CPU seeded-sampling defect unpatched (the reproduction uses it)")
STEP_METRICS = Flag("DFLASH_VLLM_STEP_METRICS", "1",
                    "0: no draft/verify step timers and no dflash:* step histograms on /metrics")
CPU_ATTN = Flag("DFLASH_VLLM_CPU_ATTN", "1",
                "0: drafter attention through the PyTorch path on CPU too, not vLLM's paged CPU kernel")
FUSED_OPS = Flag("DFLASH_VLLM_FUSED_OPS", "1",
                 "0: drafter RMSNorm/SiLU through the layers' own forward, not vLLM's C++ kernels (CPU)")
FIXED_K = Flag("DFLASH_VLLM_FIXED_K", "",
               "drafts per request per step: N pins N, 'adaptive' the policy, 'none' K every step; unset: the "
               "speculative config's dflash_fixed_k / dflash_adaptive decide (adaptive on one CPU rank, else K)")
CPU_GEMM_WIDTHS = Flag("DFLASH_VLLM_CPU_GEMM_WIDTHS", "1",
                       "0: a DFlash engine's oneDNN linears (CPU) run at each batch's own row count, not padded to "
                       "one of a few dozen widths (fixes/cpu_gemm_widths.py)")
ADAPTIVE_STATS = Flag("DFLASH_VLLM_ADAPTIVE_STATS", "0",
                      "1: the proposer prints its drafter-forward counters at exit (tests)")
STEP_TIMES = Flag("DFLASH_VLLM_STEP_TIMES", "",
                  "set by the add-on: the shared-memory step-time table the engine processes write to")
ONEDNN_CACHE = Flag("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "",
                    "oneDNN's; the add-on sets 64 in vLLM's CPU processes when unset (fixes/cpu_onednn_cache.py)")

FLAGS = (NATIVE, NO_SEED_FIX, STEP_METRICS, CPU_ATTN, FUSED_OPS, CPU_GEMM_WIDTHS, FIXED_K, ADAPTIVE_STATS, STEP_TIMES, ONEDNN_CACHE)
_OFF = ("0", "false", "False", "FALSE", "no", "off")


def value(flag: Flag) -> str:
    raw = os.environ.get(flag.name, "").strip()
    return raw if raw else flag.default


def enabled(flag: Flag) -> bool:
    return value(flag) not in ("",) + _OFF


def is_set(flag: Flag) -> bool:
    return os.environ.get(flag.name, "").strip() != ""


def set(flag: Flag, val) -> None:  # noqa: A001 - reads as envs.set(FLAG, value)
    os.environ[flag.name] = str(val)


def unset(flag: Flag) -> None:
    os.environ.pop(flag.name, None)
