"""A LLaMA-architecture target (tied embeddings, like SmolLM2-135M-Instruct) next to the Qwen3
one: greedy outputs through our proposer are token-identical to no speculation, and at batch 1
the accepted-draft counts per step equal our PyTorch reference loop's on the same weights."""

import random

import pytest
import torch

from dflash_vllm.harness import run_job_subprocess

from ..conftest import first_divergence

pytestmark = pytest.mark.e2e
K = 7
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def llama_pair(tmp_path_factory):
    from dflash_vllm.tiny import make_tiny_target, make_trained_tiny_drafter

    root = tmp_path_factory.mktemp("llama")
    target = make_tiny_target(str(root / "target"), arch="llama", seed=3)
    return target, make_trained_tiny_drafter(target, str(root / "drafter"), steps=200)


@pytest.fixture(scope="module")
def runs(llama_pair):
    target, drafter = llama_pair
    r = random.Random(11)
    prompts = [[r.randrange(3, 510) for _ in range(r.randint(4, 60))] for _ in range(12)]
    job = {"model": target, "requests": [{"prompt_token_ids": p, "max_tokens": MAX_TOKENS} for p in prompts],
           "engine": {"max_num_seqs": 1}}
    spec = {"method": "dflash", "model": drafter, "num_speculative_tokens": K, "dflash_fixed_k": K}
    return prompts, run_job_subprocess(dict(job, speculative_config=None)), run_job_subprocess(dict(job, speculative_config=spec))


def test_llama_greedy_identical_to_no_speculation(runs):
    _, base, ours = runs
    assert "dflash-vllm 0.1.0 active" in ours["log"]
    for i, (a, b) in enumerate(zip(ours["outputs"], base["outputs"])):
        assert a["token_ids"] == b["token_ids"], f"request {i}: {first_divergence(a['token_ids'], b['token_ids'])}"
    acc = [x for o in ours["outputs"] for x in o["accepted_per_step"]]
    assert 0 < sum(acc) < K * len(acc), f"acceptance {sum(acc)}/{K * len(acc)}: the comparison says little"


def test_llama_accepted_counts_equal_the_reference(runs, llama_pair):
    from transformers import AutoModelForCausalLM

    from dflash_vllm.torch_drafter import DFlashDrafter
    from dflash_vllm.reference import generate

    prompts, _, ours = runs
    target = AutoModelForCausalLM.from_pretrained(llama_pair[0], dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(llama_pair[1]).eval()
    for i, (p, o) in enumerate(zip(prompts, ours["outputs"])):
        ref = generate(target, drafter, p, MAX_TOKENS, num_speculative_tokens=K)
        assert o["token_ids"] == ref.token_ids[:MAX_TOKENS], f"prompt {i}: tokens differ from the reference"
        # the last verify step can be cut short by max_tokens differently
        assert o["accepted_per_step"][:-1] == ref.accepted[: len(o["accepted_per_step"]) - 1], (
            f"prompt {i}: ours {o['accepted_per_step']} vs reference {ref.accepted}")
