import os

import pytest
import torch

from dflash_vllm.tiny import make_tiny_drafter, make_tiny_target

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session")
def demo_workload():
    """The demo pair on held-out task prompts, EOS honoured: acceptance is high (tau ~6.5 at K=15)."""
    from transformers import AutoTokenizer

    from dflash_vllm import paths
    from dflash_vllm.prompts import prompt_set

    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set("tasks", tok, 16)
    return [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]}
            for p in ids]


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    make_tiny_target(str(root / "target"))
    make_tiny_drafter(str(root / "drafter"), str(root / "target"))
    return root


@pytest.fixture(scope="session")
def tiny_models(tiny_dir):
    from transformers import AutoModelForCausalLM

    from dflash_vllm.torch_drafter import DFlashDrafter

    target = AutoModelForCausalLM.from_pretrained(str(tiny_dir / "target"), torch_dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(str(tiny_dir / "drafter")).eval()
    return target, drafter


@pytest.fixture(scope="session")
def trained_tiny_drafter(tiny_dir):
    """A drafter trained ~1 minute on the tiny target's own outputs (acceptance neither 0 nor full)."""
    from dflash_vllm.tiny import make_trained_tiny_drafter

    return make_trained_tiny_drafter(str(tiny_dir / "target"), str(tiny_dir / "drafter_trained"), steps=300)


def first_divergence(a: list[int], b: list[int]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first diverging position {i}: {x} vs {y} (context {a[max(0, i - 5):i]})"
    if len(a) != len(b):
        return f"lengths differ: {len(a)} vs {len(b)} (identical up to {min(len(a), len(b))})"
    return "identical"
