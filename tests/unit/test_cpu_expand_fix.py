"""vLLM 0.32's CPU expand kernel loses float/int32 outputs; ours keeps them (lossless sampling)."""

import pytest
import torch

pytestmark = pytest.mark.unit


def _expand(impl, x, cu, n, **kw):
    out = x.new_full((n,), -7)
    impl(out, x, cu, kw.get("replace_from", 0), kw.get("replace_to", 0))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64])
def test_ours_expands_every_dtype(dtype):
    from dflash_vllm.fixes.cpu_expand import expand_kernel_impl

    x = torch.tensor([0.7, 0, 0.5]).to(dtype) if dtype.is_floating_point else torch.tensor([20, 0, 3], dtype=dtype)
    cu = torch.tensor([2, 5, 6], dtype=torch.int32)
    out = _expand(expand_kernel_impl, x, cu, 7, replace_from=0, replace_to=1)
    want = [x[0], x[0], 1, 1, 1, x[2], -7]
    assert out.tolist() == pytest.approx(torch.tensor(want, dtype=dtype).tolist()), out


def test_stock_vllm_cpu_kernel_is_broken_for_floats():
    """The upstream defect, reproduced: documents why the fix exists (flip when vLLM fixes it)."""
    from vllm.platforms.cpu import CpuPlatform

    CpuPlatform.import_kernels()
    import importlib

    stock = importlib.import_module("vllm.utils.cpu_triton_utils")
    impl = getattr(stock, "_dflash_original_expand", None) or stock._expand_kernel_impl
    from dflash_vllm.fixes.cpu_expand import expand_kernel_impl

    if impl is expand_kernel_impl:
        pytest.fail("the stock kernel was already replaced in this process; cannot reproduce")
    x = torch.tensor([0.7, 1.0, 0.5])
    out = _expand(impl, x, torch.tensor([2, 5, 6]), 6)
    assert out.tolist() != pytest.approx([0.7, 0.7, 1.0, 1.0, 1.0, 0.5])


def test_plugin_installs_the_fix():
    import sys

    from dflash_vllm import _plugin

    _plugin._patch_cpu_kernels(sys.modules.setdefault("fake_cpu_triton_utils", type(sys)("fake_cpu_triton_utils")))
    from dflash_vllm.fixes.cpu_expand import expand_kernel_impl

    assert sys.modules["fake_cpu_triton_utils"]._expand_kernel_impl is expand_kernel_impl
