"""Drafter data and training where vLLM is not installed (a GPU training box), run here on CPU:
`regen --engine hf` answers like unbatched greedy decoding and resumes like the vLLM path;
`prompts --set self` writes new, finished user turns; `train --time-budget-s` fits the schedule
into the budget; `--save-dtype`; training data read from `.jsonl.xz`."""

import json
import lzma
import os
import shutil

import pytest
import torch
from safetensors import safe_open

from dflash_vllm.smollm2 import DEFAULT_OUT
from dflash_vllm.training.regen import compare, regenerate_hf
from dflash_vllm.training.trainer import Recipe, load_examples, train

pytestmark = pytest.mark.unit

needs_smollm2 = pytest.mark.skipif(not os.path.exists(os.path.join(DEFAULT_OUT, "tokenizer.json")),
                                   reason="./setup.sh converts SmolLM2 (its tokenizer and chat template are used here)")
# lengths grow down the list, so longest-first batching reorders them
PROMPTS = ["Hi.", "List three fruits.", "Write a haiku about rain in the city.",
           "Explain recursion briefly, with one short example in Python.",
           "Why is the sky blue? Answer in two sentences for a child who asks why it is not green.",
           "Name a river in Africa and the countries it flows through, from its source to the sea, in order.",
           "How do magnets work? Explain the fields, the poles, and why some metals stick to them while others never do."]


@pytest.fixture(scope="module")
def chat_target(tmp_path_factory):
    """A tiny random LLaMA with SmolLM2's tokenizer and chat template."""
    from dflash_vllm.tiny import make_tiny_target

    path = str(tmp_path_factory.mktemp("chat") / "target")
    make_tiny_target(path, vocab_size=49152, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                     arch="llama")
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(os.path.join(DEFAULT_OUT, f), path)
    return path


def _lines(path):
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


@needs_smollm2
def test_hf_answers_are_unbatched_greedy_in_prompt_order_and_a_rerun_resumes(chat_target, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dflash_vllm.prompts import chat_ids

    out = str(tmp_path / "answers.jsonl")
    # batches of 2, longest first, left-padded; chunks of 3 written as they finish
    assert regenerate_hf(chat_target, PROMPTS[:5], out, max_tokens=10, chunk=3, device="cpu", batch_size=2) == 5
    rows = _lines(out)
    tok = AutoTokenizer.from_pretrained(chat_target)
    model = AutoModelForCausalLM.from_pretrained(chat_target, dtype=torch.float32).eval()
    for p, row in zip(PROMPTS, rows):
        ids = chat_ids(tok, p)
        assert row["prompt_ids"] == ids
        ref = model.generate(torch.tensor([ids]), max_new_tokens=10, do_sample=False, eos_token_id=2, pad_token_id=0)
        assert row["response_ids"] == ref[0, len(ids):].tolist()  # stops at the end token, which is kept
    # a longer prompt list: the five answers stay as they are, two more are added
    assert regenerate_hf(chat_target, PROMPTS, out, max_tokens=10, chunk=3, device="cpu", batch_size=2) == 7
    assert _lines(out)[:5] == rows and len(_lines(out)) == 7
    # answers to other prompts are refused, not appended to
    with pytest.raises(SystemExit, match="other prompts"):
        regenerate_hf(chat_target, PROMPTS[::-1], out, max_tokens=10, device="cpu")
    # a spent budget writes nothing, but leaves the file there
    empty = str(tmp_path / "empty.jsonl")
    assert regenerate_hf(chat_target, PROMPTS, empty, max_tokens=10, device="cpu", time_budget_s=1e-9) == 0
    assert os.path.exists(empty) and not _lines(empty)


def test_compare_counts_identical_answers_and_the_first_difference(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps({"prompt_ids": [i], "response_ids": r}) + "\n"
                         for i, r in enumerate([[1, 2, 3], [4, 5, 6, 7], [8, 9]])))
    b.write_text("".join(json.dumps({"prompt_ids": [i], "response_ids": r}) + "\n"
                         for i, r in enumerate([[1, 2, 3], [4, 5, 0, 7], [8, 9, 10], [11]])))
    assert compare(str(a), str(b)) == {"prompts": 3, "identical": 1, "first_difference_median": 2, "tokens_compared": 9}


@needs_smollm2
def test_self_written_prompts_are_new_finished_user_turns():
    from dflash_vllm.training.hf_generate import load_target, user_prompts

    model, tok = load_target(DEFAULT_OUT, "cpu")
    first = user_prompts(model, tok, 3, seed=5, batch_size=8, max_new_tokens=40)
    assert len(first) == 3 and len({p.lower() for p in first}) == 3
    assert all(3 <= len(p.split()) <= 80 and "<|" not in p for p in first)
    # the same seed with those three excluded: three others
    again = user_prompts(model, tok, 3, seed=5, batch_size=8, max_new_tokens=40, exclude=set(first))
    assert len(again) == 3 and not {p.lower() for p in again} & {p.lower() for p in first}, (first, again)


def test_time_budget_fits_the_schedule_and_weights_save_in_the_asked_dtype(tiny_dir, tmp_path):
    data = tmp_path / "data.jsonl"
    with open(data, "w") as f:
        for i in range(16):
            f.write(json.dumps({"prompt_ids": [3 + i, 4, 5], "response_ids": [(7 * i + j) % 500 + 3 for j in range(30)]}) + "\n")
    xz = tmp_path / "data.jsonl.xz"
    with lzma.open(xz, "wt") as f:
        f.write(data.read_text())
    assert load_examples(str(xz)) == load_examples(str(data))
    recipe = Recipe(block_size=8, num_draft_layers=1, num_anchors=4, batch_size=4, seed=0, target_layer_ids=[1, 3])
    rec = train(str(tiny_dir / "target"), str(xz), str(tmp_path / "out"), recipe, mask_token_id=511, max_steps=5000,
                progress=False, time_budget_s=4.0, save_dtype="float16")
    assert 20 <= rec["steps"] < 5000 and rec["time_budget_s"] == 4.0
    assert rec["seconds"] < 30, rec["seconds"]
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}

