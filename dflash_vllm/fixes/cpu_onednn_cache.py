"""Bound oneDNN's global primitive cache in vLLM's CPU processes (a memory default, not a code patch).

vLLM's CPU linear layers run through ``vllm._custom_ops.onednn_mm``: each layer keeps up to 32
matmul primitives of its own, one per batch-token count M, and oneDNN also keeps a process-wide
cache of up to ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` primitives (default 1024), each holding
JIT code and buffers sized for its M. A server sees hundreds of distinct M (decode batches,
prefill chunks, and under speculation the verify and drafter widths), so the worker's RSS climbs
by hundreds of MiB until that cache is full: in a 30-minute soak at concurrency 64 the DFlash
worker reached its plateau only at minute 20 (fewer steps per minute than no speculation, so
the shapes arrive more slowly), which is indistinguishable from a leak for a supervisor.

The layers' own caches already give the hits; the global cache mostly adds memory. With the
capacity at 64 the same synthetic load (24 layers, 342 distinct M, shuffled) grows RSS by ~170
MiB, flat from the first pass, against 664 -> 883 MiB and still climbing at 1024, in the same
time (``dflash-vllm bench onednn-cache`` reproduces both). The value is a default: a capacity the user
set in the environment wins. oneDNN reads it when it creates its first primitive, so it is set
as soon as ``vllm._custom_ops`` is imported, before any model is loaded.
"""

from __future__ import annotations

from .. import envs

CAPACITY = 64


def install(module=None) -> bool:
    """Set the capacity default; True if we set it, False if the user already had."""
    if envs.is_set(envs.ONEDNN_CACHE):
        return False
    envs.set(envs.ONEDNN_CACHE, CAPACITY)
    return True
