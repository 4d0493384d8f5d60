"""Fix for a vLLM 0.32 CPU defect that makes speculative *sampling* lossy.

vLLM's CPU build replaces the rejection sampler's Triton ``expand_kernel`` with a C++ op that
only handles int64: ``vllm.utils.cpu_triton_utils._expand_kernel_impl`` passes
``_ensure_int64(output)``, a converted *copy* when ``output`` is float32 (temperature,
top-p) or int32 (top-k), so the kernel writes into a temporary and the real per-token
temperature/top-k/top-p tensors stay uninitialised memory. The target distribution the
rejection sampler accepts against is then garbage; greedy is unaffected (it never expands).

Our replacement has the same signature, keeps the dtype, and is plain PyTorch. It is
installed before the CPU platform registers its kernel overrides (the plugin loads first).
Minimal reproduction for upstream: see tests/unit/test_cpu_expand_fix.py.
"""

from __future__ import annotations

import torch


def expand_kernel_impl(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):  # noqa: N803
    """output[cu[i-1]:cu[i]] = input_val[i] (replace_from -> replace_to), any dtype."""
    cu = cu_num_tokens.to(torch.long)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    values = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    expanded = torch.repeat_interleave(values, counts)
    output[: expanded.numel()].copy_(expanded.to(output.dtype))


def install(module) -> None:
    """Patch ``vllm.utils.cpu_triton_utils`` (called when that module is imported)."""
    module._dflash_original_expand = getattr(module, "_expand_kernel_impl", None)
    module._expand_kernel_impl = expand_kernel_impl
