"""Fix for a vLLM 0.32 CPU defect: a seeded sampled request whose prompt is prefilled over
several steps (chunked prefill) kills the engine.

After a step that only prefilled part of a prompt, vLLM discards the token it sampled for that
request and rewinds the request's generator so the discarded draw leaves no trace:
``GPUModelRunner._bookkeeping_sync`` calls ``gen.set_offset(gen.get_offset() - 4)``. That is
the CUDA Philox API; a CPU ``torch.Generator`` (mt19937) has no offset and raises
``RuntimeError: CPU Generator does not use offset``. The engine core dies, every in-flight
request fails and the API server exits: any client can trigger it with ``seed`` and a long
enough prompt (no speculation needed, but K+1 slots per running request make chunking likelier).

The fix keeps the same guarantee without the offset API, for CPU generators only: for the
requests whose sample this step will discard, ``sample_tokens`` runs with their generators
taken out of the batch (the discarded draw and any draft drawn for them use the global RNG),
and puts them back untouched afterwards. A partial-prefill step then consumes nothing of the
request's own stream, which is what the CUDA rewind aims at (exactly, also when the drafter
draws from the generator). Rows whose sample is kept are not touched, so the sampling law and
every other request's stream are unchanged. CUDA generators keep vLLM's own path.

Reproduction: ``tests/e2e/test_seeded_chunked_prefill.py`` (stock engine dies, fixed engine
serves the same load; seeded outputs equal whether the prompt was chunked or not).
"""

from __future__ import annotations

import functools
import inspect

import numpy as np



def check_target(runner_cls) -> None:
    """The patch's assumptions about vLLM, asserted: a renamed attribute must not make it a no-op."""
    src = inspect.getsource(runner_cls._bookkeeping_sync)
    assert "set_offset" in src and "discard_request_mask" in src, (
        "vLLM's _bookkeeping_sync no longer rewinds generators with set_offset; "
        "re-check dflash_vllm/fixes/cpu_seeded_chunks.py against this vLLM version"
    )
    assert hasattr(runner_cls, "sample_tokens"), "GPUModelRunner.sample_tokens is gone"


def install(module) -> None:
    """Wrap ``GPUModelRunner.sample_tokens`` (called when ``vllm.v1.worker.gpu_model_runner`` is imported)."""
    runner_cls = module.GPUModelRunner
    original = runner_cls.sample_tokens
    if getattr(original, "_dflash_seed_fix", False):
        return
    check_target(runner_cls)

    @functools.wraps(original)
    def sample_tokens(self, grammar_output):
        held = _take_discarded_cpu_generators(self)
        try:
            return original(self, grammar_output)
        finally:
            self.input_batch.generators.update(held)

    sample_tokens._dflash_seed_fix = True  # type: ignore[attr-defined]
    runner_cls.sample_tokens = sample_tokens


def _take_discarded_cpu_generators(runner) -> dict:
    if runner.execute_model_state is None:
        return {}
    generators = runner.input_batch.generators
    if not generators:
        return {}
    num_reqs = runner.input_batch.num_reqs
    held = {}
    for i in np.nonzero(runner.discard_request_mask.np[:num_reqs])[0].tolist():
        gen = generators.get(i)
        if gen is not None and gen.device.type == "cpu":
            held[i] = generators.pop(i)
    return held
