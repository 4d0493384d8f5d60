"""Greedy outputs with our DFlash proposer are token-identical to no speculation, under
continuous batching (waves), prefix caching with shared prefixes, chunked prefill, a KV cache
small enough to force preemption, stop tokens that fall inside accepted blocks, and K in
{1, 3, 7, 15}."""

import random

import pytest
import torch

from dflash_vllm.harness import run_job_subprocess

from ..conftest import first_divergence

pytestmark = pytest.mark.e2e

NUM_PROMPTS = 64
ENGINE = {
    "max_num_batched_tokens": 128,  # 400-token prompts are prefilled in chunks
    "enable_prefix_caching": True,
    "enable_chunked_prefill": True,
    "block_size": 32,
    "num_gpu_blocks_override": 48,  # 1,536 tokens of KV for 16 running requests: preemption
    "max_num_seqs": 16,
    "max_model_len": 1024,
}


@pytest.fixture(scope="module")
def workload(tiny_dir):
    from transformers import AutoModelForCausalLM

    r = random.Random(1234)
    shared = [r.randrange(3, 510) for _ in range(96)]  # a common system-prompt-like prefix
    reqs = []
    for i in range(NUM_PROMPTS):
        n = 1 + (i * 399) // (NUM_PROMPTS - 1)  # prompt lengths spread over 1..400
        body = [r.randrange(3, 510) for _ in range(n)]
        prompt = (shared + body)[:n] if i % 2 and n > 96 else body
        reqs.append({"prompt_token_ids": prompt, "max_tokens": 1 + (i * 37) % 300, "arrive_step": (i % 8) * 4})
    # Stop tokens that fall mid-output: the token the target itself emits at position 6..9.
    target = AutoModelForCausalLM.from_pretrained(str(tiny_dir / "target"), dtype=torch.float32).eval()
    for i in range(0, NUM_PROMPTS, 8):
        prompt = reqs[i]["prompt_token_ids"]
        with torch.no_grad():
            out = target.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False, pad_token_id=0, eos_token_id=None)
        reqs[i]["stop_token_ids"] = [int(out[0, len(prompt) + 6 + (i // 8) % 4])]
        reqs[i]["max_tokens"] = 200
    return reqs


@pytest.fixture(scope="module")
def baseline(tiny_dir, workload):
    return run_job_subprocess({"model": str(tiny_dir / "target"), "speculative_config": None, "engine": ENGINE,
                               "requests": workload})


# K = 3 runs with `-m slow` only: 1, 7 and 15 bracket it, and the default suite stays near 30 min.
@pytest.mark.parametrize("k", [1, pytest.param(3, marks=pytest.mark.slow), 7, 15, "adaptive"])
def test_greedy_identical_to_no_speculation(tiny_dir, trained_tiny_drafter, workload, baseline, k):
    spec = {"method": "dflash", "model": trained_tiny_drafter, "num_speculative_tokens": k}
    if k == "adaptive":  # the adaptive policy (0..15 drafts per request per step)
        spec.update(num_speculative_tokens=15, dflash_adaptive=True)
        k = 1
    out = run_job_subprocess({"model": str(tiny_dir / "target"), "speculative_config": spec, "engine": ENGINE,
                              "requests": workload})
    assert "dflash-vllm 0.1.0 active" in out["log"], "our proposer was not the one running"
    for i, (a, b) in enumerate(zip(out["outputs"], baseline["outputs"])):
        assert a["token_ids"] == b["token_ids"], f"request {i} (k={k}): {first_divergence(a['token_ids'], b['token_ids'])}"
        assert a["finish_reason"] == b["finish_reason"], f"request {i}: finish {a['finish_reason']} vs {b['finish_reason']}"
    accepted = [x for o in out["outputs"] for x in (o["accepted_per_step"] or [])]
    assert sum(accepted) > 0, "the drafter was never accepted: the accepted-block paths went untested"
    assert max(accepted) >= min(k, 3), f"no block with >= {min(k, 3)} accepted drafts: {max(accepted)}"
    stopped = [o for o in out["outputs"] if o["finish_reason"] == "stop"]
    assert stopped, "no request ended on its stop token"
    assert out["num_preemptions"] and out["num_preemptions"] > 0, "the KV cache never forced a preemption"
    assert baseline["num_preemptions"] is not None


def test_drafter_that_never_agrees_changes_nothing(tiny_dir, workload, baseline, tmp_path):
    """Zeroed final norm: every mask slot's logits are 0, so every draft is token 0."""
    import shutil

    from safetensors.torch import load_file, save_file

    d = tmp_path / "never"
    shutil.copytree(tiny_dir / "drafter", d)
    w = load_file(str(d / "model.safetensors"))
    w["norm.weight"].zero_()
    save_file(w, str(d / "model.safetensors"))
    assert all(0 not in o["token_ids"] for o in baseline["outputs"]), "token 0 occurs in the target's output"
    spec = {"method": "dflash", "model": str(d), "num_speculative_tokens": 7}
    out = run_job_subprocess({"model": str(tiny_dir / "target"), "speculative_config": spec, "engine": ENGINE,
                              "requests": workload})
    for i, (a, b) in enumerate(zip(out["outputs"], baseline["outputs"])):
        assert a["token_ids"] == b["token_ids"], f"request {i}: {first_divergence(a['token_ids'], b['token_ids'])}"
    assert sum(x for o in out["outputs"] for x in (o["accepted_per_step"] or [])) == 0
