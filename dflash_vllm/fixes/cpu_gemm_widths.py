"""A DFlash engine's oneDNN linears on CPU run at one of a few dozen batch widths (rows padded).

vLLM's CPU build runs every fp32 linear layer through ``vllm._custom_ops.onednn_mm(handler, x,
bias)`` (``dispatch_cpu_unquantized_gemm``): each layer's handler keeps matmul primitives for 32
row counts M and builds one for any other M. Building one costs ~0.4-1.2 ms per layer on a
2-core VM (a hidden-256 layer whose call then takes 0.07-0.25 ms; ``dflash-vllm bench
gemm-widths``), and with the add-on's bound on oneDNN's process-wide cache
(``cpu_onednn_cache``) an evicted width is built again. Without speculation M is the batch
(plus prefill chunks); under speculation the verify runs over the batch plus its drafts and the
drafter over blocks, and with adaptive drafting the drafts per request change from step to
step, so M takes hundreds of values. Measured in the engine (demo pair, the bench's tasks cells
c = 1..64, one pass each; ``bench/results/s38/scratch/mm_misses.py``): K = 7 spent 3.1 ms per
13.8-ms step in calls at a width its layers had never seen (first pass) and 0.5 ms per step
more than warm calls on widths evicted since (second pass); adaptive drafting still met ~500
new widths in the second pass.

``install`` wraps the ``cpu_linear`` of every such layer of the target and the drafter of a
DFlash engine so that, where the layer runs eagerly (``--enforce-eager``, as the add-on's demo,
bench and tests run it; not inside a torch.compile'd graph), the rows are padded with zeros up
to ``bucket(M)``: M itself up to 8, then multiples of 8 up to 64, then 8 steps per octave (at
most 12.5 % more rows; 47 widths up to 1024, 63 up to 4096), and the first M rows of the result
returned. Rows of a matmul do not mix, so the output rows are the layer's on the same input
(checked bitwise against the unpadded call in tests/unit/test_cpu_gemm_widths.py). Engines without our DFlash (a
``none`` baseline, vLLM's own DFlash) are untouched. ``DFLASH_VLLM_CPU_GEMM_WIDTHS=0`` turns it
off.
"""

from __future__ import annotations

import torch

from .. import envs

MARK = "_dflash_padded_widths"


def bucket(m: int) -> int:
    """The width M rows are padded to: M up to 8, multiples of 8 up to 64, then 8 per octave."""
    if m <= 8:
        return m
    step = 8 if m <= 64 else 1 << (m.bit_length() - 4)
    return -(-m // step) * step


def _runs_onednn(fn) -> bool:
    """vLLM 0.32 sets ``layer.cpu_linear = lambda x, weight, bias: ops.onednn_mm(handler, x, bias)``."""
    code = getattr(fn, "__code__", None)
    return code is not None and "onednn_mm" in code.co_names


def padded(fn):
    """``fn(x, weight, bias)`` called with x's rows padded to ``bucket(rows)``; the first rows back."""

    def linear(x, weight, bias):
        # Under torch.compile (vLLM's default without --enforce-eager) the row count is symbolic
        # and the graph is traced once for all of them: padding there failed the trace (a
        # ConstraintViolationError at start-up, session 38), so the compiled graph keeps vLLM's call.
        if torch.compiler.is_compiling():
            return fn(x, weight, bias)
        m = x.shape[0] if x.dim() == 2 else 0
        if m == 0 or (b := bucket(m)) == m:
            return fn(x, weight, bias)
        xp = x.new_empty((b, x.shape[1]))
        xp[:m] = x
        xp[m:].zero_()
        return fn(xp, weight, bias)[:m]

    setattr(linear, MARK, fn)
    return linear


def install(*models) -> int:
    """Wrap the oneDNN ``cpu_linear`` of every layer of ``models``; the number wrapped (0 where
    turned off). Layers already wrapped, or on another kernel, are left as they are."""
    if not envs.enabled(envs.CPU_GEMM_WIDTHS):
        return 0
    n = 0
    for model in models:
        for module in model.modules():
            fn = getattr(module, "cpu_linear", None)
            if fn is None or hasattr(fn, MARK) or not _runs_onednn(fn):
                continue
            module.cpu_linear = padded(fn)
            n += 1
    return n
