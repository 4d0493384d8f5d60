"""On a CUDA device (marker ``gpu``; skipped without one; run with ``pytest -m gpu tests/gpu``):
the checks of ``dflash_vllm.gpu_check`` (the same ones bench/gpu.sh runs and writes to JSON).

- which model runner, proposer and drafter class each engine built (by type, in the worker):
  ours under Model Runner V1 by default; vLLM's V2 DFlashSpeculator on vLLM's drafter class when
  V2 is forced (the add-on hands over instead of crashing); vLLM's V2 DFlash with DFLASH_VLLM_NATIVE=1;
- greedy token identity to no speculation under batching, prefix caching, chunked prefill and
  preemption (ours, and the forced-V2 hand-over);
- exactness of speculative sampling (short G-test);
- none / ours / native at concurrency 1, 8, 32 all run, with tau > 1 for both DFlash methods.
"""

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.e2e]

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from dflash_vllm.gpu_check import make_models

    return make_models(str(tmp_path_factory.mktemp("gpu-models")))


def _assert_ok(result: dict) -> None:
    for name, check in result.items():
        assert check["ok"], f"{name}: {check['errors']}"


def test_runner_choice_and_greedy_lossless(models):
    from dflash_vllm.gpu_check import check_runner_and_lossless

    _assert_ok(check_runner_and_lossless(models, on_cuda=True))


def test_sampling_exact(models):
    from dflash_vllm.gpu_check import check_sampling_exact

    _assert_ok(check_sampling_exact(models))


def test_sweep_ours_native_none(models):
    from dflash_vllm.gpu_check import sweep

    result = sweep(models, (1, 8, 32), on_cuda=True)
    _assert_ok(result)
    for cell in result["sweep"]["cells"]:
        assert cell["output_tokens_per_s"] > 0
        if cell["method"] != "none":
            assert cell["tau"] and cell["tau"] > 1.0, cell
