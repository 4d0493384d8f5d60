"""Seeded sampled requests whose prompts are prefilled in chunks (vLLM 0.32 CPU defect, see
dflash_vllm/fixes/cpu_seeded_chunks.py): the stock engine dies, the fixed one serves the same
load, and a seed gives the same output whether its prompt was chunked or not."""

import random

import pytest

from dflash_vllm.harness import run_job_subprocess

from ..conftest import first_divergence

pytestmark = pytest.mark.e2e

CHUNKED = {"max_num_batched_tokens": 128, "enable_chunked_prefill": True, "max_num_seqs": 12, "max_model_len": 1024}
WHOLE = {**CHUNKED, "max_num_batched_tokens": 1024}  # every 300-token prompt in one step


@pytest.fixture(scope="module")
def seeded_load():
    r = random.Random(7)
    return [{"prompt_token_ids": [r.randrange(3, 510) for _ in range(260 + 7 * i)], "max_tokens": 24,
             "temperature": 1.0, "seed": 1000 + i} for i in range(12)]


@pytest.fixture(scope="module")
def spec(trained_tiny_drafter):
    return {"method": "dflash", "model": trained_tiny_drafter, "num_speculative_tokens": 3,
            "draft_sample_method": "probabilistic"}


def test_stock_vllm_cpu_dies_on_seeded_chunked_prefill(tiny_dir, seeded_load, spec):
    """The upstream defect, reproduced (flip this test when vLLM fixes it)."""
    job = {"model": str(tiny_dir / "target"), "speculative_config": spec, "engine": CHUNKED, "requests": seeded_load}
    with pytest.raises(RuntimeError, match="does not use offset"):
        run_job_subprocess(job, env={"DFLASH_VLLM_NO_SEED_FIX": "1"})


@pytest.mark.parametrize("adaptive", [True, False], ids=["adaptive", "k_every_step"])
def test_fixed_engine_serves_it_and_seeds_ignore_chunking(tiny_dir, seeded_load, spec, adaptive):
    """Under the adaptive policy too: a seeded request whose first chunk arrived while drafting
    did not pay was once kept from drafting at all (its seed then gave another output than the
    same prompt in one chunk: ``DFlashProposer._close_door`` read seeds from the sampling
    metadata, which holds no generator for partial chunks)."""
    job = {"model": str(tiny_dir / "target"), "speculative_config": dict(spec, dflash_adaptive=adaptive),
           "requests": seeded_load}
    chunked = run_job_subprocess({**job, "engine": CHUNKED})
    whole = run_job_subprocess({**job, "engine": WHOLE})
    assert [len(o["token_ids"]) for o in chunked["outputs"]] == [24] * len(seeded_load)
    for i, (a, b) in enumerate(zip(chunked["outputs"], whole["outputs"])):
        assert a["token_ids"] == b["token_ids"], f"request {i}: {first_divergence(a['token_ids'], b['token_ids'])}"
    # Different seeds give different streams (the generator really drives these rows).
    assert len({tuple(o["token_ids"]) for o in chunked["outputs"]}) == len(seeded_load)
