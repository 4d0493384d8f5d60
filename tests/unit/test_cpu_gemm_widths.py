"""fixes/cpu_gemm_widths.py: the widths rows are padded to, the rows that come back, which layers
get it, and its reproduction."""

from __future__ import annotations

import pytest
import torch

from dflash_vllm import envs
from dflash_vllm.fixes import cpu_gemm_widths as W

pytestmark = pytest.mark.unit
ops = pytest.importorskip("vllm._custom_ops")
needs_onednn = pytest.mark.skipif(not getattr(ops, "_supports_onednn", False), reason="vLLM's CPU build only")


def test_widths_are_few_and_never_pad_much():
    widths = [W.bucket(m) for m in range(1, 4097)]
    assert all(b >= m for m, b in zip(range(1, 4097), widths))
    assert widths == sorted(widths)  # monotone: a larger batch never gets a smaller width
    assert widths[:8] == list(range(1, 9))  # decode batches up to 8 as they are
    assert all(W.bucket(m) <= 1.125 * m for m in range(65, 4097))
    assert len(set(widths[:1024])) == 47 and len(set(widths)) == 63
    assert all(W.bucket(b) == b for b in set(widths))  # a width is its own bucket


def _onednn_linear(n: int, k: int, seed: int = 0):
    """A layer's cpu_linear as vLLM 0.32 sets it (utils.dispatch_cpu_unquantized_gemm)."""
    g = torch.Generator().manual_seed(seed)
    handler = ops.create_onednn_mm(torch.randn(n, k, generator=g).t(), 32)
    return lambda x, weight, bias: ops.onednn_mm(handler, x, bias)


@needs_onednn
@pytest.mark.parametrize("m", [1, 7, 9, 13, 63, 65, 100, 257, 1000])
def test_padded_rows_equal_the_layers_own(m):
    fn = _onednn_linear(96, 64)
    x = torch.randn(m, 64, generator=torch.Generator().manual_seed(m))
    bias = torch.randn(96)
    got = W.padded(fn)(x, None, bias)
    assert got.shape == (m, 96)
    assert torch.equal(got, fn(x, None, bias))  # rows of a matmul do not mix: bitwise the same


def test_the_layer_sees_only_bucket_widths():
    seen = []

    def fn(x, weight, bias):
        seen.append(x.shape[0])
        return x * 2.0

    f = W.padded(fn)
    for m in (1, 9, 30, 65, 77, 300):
        x = torch.randn(m, 4)
        assert torch.equal(f(x, None, None), x * 2.0)
    assert seen == [1, 16, 32, 72, 80, 320]


def test_a_compiled_graph_traces_through_it_unpadded():
    """vLLM compiles the target without --enforce-eager (one trace, the row count symbolic):
    padding there failed the trace at engine start (ConstraintViolationError), so under
    torch.compile the wrapper is vLLM's call as it was."""
    w = torch.randn(8, 4)
    seen = []

    def fn(x, weight, bias):
        seen.append(x.shape[0])
        return x @ w.t()

    f = W.padded(fn)
    compiled = torch.compile(lambda x: f(x, None, None), backend="eager", fullgraph=True, dynamic=True)
    for m in (3, 11, 70):
        x = torch.randn(m, 4)
        assert torch.allclose(compiled(x), x @ w.t())
    assert all(not isinstance(s, int) or s not in (16, 72) for s in seen)  # traced with the symbolic rows


class _Layer(torch.nn.Module):
    def __init__(self, cpu_linear):
        super().__init__()
        self.cpu_linear = cpu_linear


@needs_onednn
def test_install_wraps_onednn_layers_once_and_only_them(monkeypatch):
    monkeypatch.delenv(envs.CPU_GEMM_WIDTHS.name, raising=False)
    onednn, plain = _onednn_linear(32, 16), torch.nn.functional.linear
    model = torch.nn.Sequential(_Layer(onednn), _Layer(plain), torch.nn.Linear(4, 4))
    assert W.install(model) == 1
    assert hasattr(model[0].cpu_linear, W.MARK) and model[1].cpu_linear is plain
    assert W.install(model) == 0  # already wrapped
    x = torch.randn(11, 16)
    assert torch.equal(model[0].cpu_linear(x, None, None), onednn(x, None, None))


@needs_onednn
def test_off_switch(monkeypatch):
    monkeypatch.setenv(envs.CPU_GEMM_WIDTHS.name, "0")
    model = torch.nn.Sequential(_Layer(_onednn_linear(32, 16)))
    assert W.install(model) == 0 and not hasattr(model[0].cpu_linear, W.MARK)


@needs_onednn
def test_reproduction_runs_and_pads_to_few_widths():
    """`dflash-vllm bench gemm-widths` at small scale (its times are read in bench/README.md,
    not asserted here): the same verify widths, under half the distinct row counts padded."""
    from dflash_vllm.bench import gemm_widths

    exact = gemm_widths.run("exact", layers=1, steps=10, passes=1)
    padded = gemm_widths.run("padded", layers=1, steps=10, passes=1)
    assert exact[0]["distinct_rows"] == len(set(gemm_widths.widths(10)))
    assert padded[0]["distinct_rows"] == len({W.bucket(m) for m in gemm_widths.widths(10)})
    assert padded[0]["distinct_rows"] * 2 < exact[0]["distinct_rows"]
