"""A bad pairing fails in the front-end with one line naming the fix: no engine process starts."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


def _llm_error(target, spec) -> subprocess.CompletedProcess:
    code = (
        "import json, sys\n"
        "from vllm import LLM\n"
        "from dflash_vllm.config import DFlashConfigError\n"
        "if __name__ == '__main__':\n"
        "    try:\n"
        f"        LLM(model={target!r}, speculative_config=json.loads({json.dumps(spec)!r}), skip_tokenizer_init=True,\n"
        "            dtype='float32', gpu_memory_utilization=0.3, max_model_len=512, enforce_eager=True)\n"
        "    except DFlashConfigError as e:\n"
        "        print('ERROR:', e); sys.exit(3)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def gpt2_target(tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    d = tmp_path_factory.mktemp("gpt2")
    GPT2LMHeadModel(GPT2Config(vocab_size=512, n_embd=128, n_layer=4, n_head=4, n_positions=1024)).save_pretrained(d)
    return str(d)


@pytest.mark.parametrize(
    "k, match",
    [(16, "set num_speculative_tokens between 1 and 15"), (3, None)],
)
def test_llm_front_end_rejects_before_engine_start(tiny_dir, k, match):
    spec = {"method": "dflash", "model": str(tiny_dir / "drafter"), "num_speculative_tokens": k}
    if match is None:  # a wrong drafter path
        spec["model"] = str(tiny_dir / "no-such-drafter")
        match = "does not exist"
    proc = _llm_error(str(tiny_dir / "target"), spec)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert match in proc.stdout
    assert "EngineCore" not in proc.stdout + proc.stderr, "an engine process was started"


def test_target_without_hidden_state_outputs(tiny_dir, gpt2_target):
    spec = {"method": "dflash", "model": str(tiny_dir / "drafter"), "num_speculative_tokens": 3}
    proc = _llm_error(gpt2_target, spec)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "cannot expose intermediate hidden states" in proc.stdout


def test_cli_serve_prints_one_line(tiny_dir):
    spec = {"method": "dflash", "model": str(tiny_dir / "drafter"), "num_speculative_tokens": 40}
    proc = subprocess.run(
        [sys.executable, "-m", "dflash_vllm.cli", "serve", str(tiny_dir / "target"), "--speculative-config",
         json.dumps(spec), "--skip-tokenizer-init", "--dtype", "float32"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("dflash-vllm: error: num_speculative_tokens=40"), last
    assert "Traceback" not in proc.stderr
