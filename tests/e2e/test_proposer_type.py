"""Which DFlash ran, by the type of the objects the engine built (read in the worker through
``LLM.collective_rpc``), not by a log line: ours by default, vLLM's with DFLASH_VLLM_NATIVE=1."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e

_SCRIPT = """
import json, sys
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
from dflash_vllm.runner_choice import describe_spec_decode
if __name__ == "__main__":
    target, drafter, eager = sys.argv[1:4]
    llm = LLM(model=target, speculative_config={"method": "dflash", "model": drafter, "num_speculative_tokens": 3},
              dtype="float32", max_model_len=256, max_num_seqs=2, enforce_eager=eager == "1", skip_tokenizer_init=True,
              gpu_memory_utilization=0.3, seed=0)
    out = llm.generate([TokensPrompt(prompt_token_ids=[5, 17, 42, 99])],
                       SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, detokenize=False))
    print("RESULT " + json.dumps({"built": llm.collective_rpc(describe_spec_decode),
                                  "tokens": list(out[0].outputs[0].token_ids)}))
"""


_RUNS: dict = {}


def _run(tiny_dir, native: bool, eager: bool = True) -> dict:
    key = (str(tiny_dir), native, eager)
    if key not in _RUNS:
        _RUNS[key] = _start(tiny_dir, native, eager)
    return _RUNS[key]


def _start(tiny_dir, native: bool, eager: bool) -> dict:
    env = dict(os.environ, DFLASH_VLLM_NATIVE="1" if native else "0", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(tiny_dir / "target"), str(tiny_dir / "drafter"),
                           "1" if eager else "0"],
                          env=env, capture_output=True, text=True, timeout=600)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_proposer_and_drafter_types(tiny_dir):
    ours, native = _run(tiny_dir, native=False), _run(tiny_dir, native=True)
    for built in ours["built"]:  # one entry per worker
        assert built["proposer"] == "dflash_vllm.proposers.dflash.DFlashProposer", built
        assert built["drafter_model"] == "dflash_vllm.models.drafter.DFlashDrafterModel", built
        assert built["padded_linears"] > 0, built  # fixes/cpu_gemm_widths.py: our DFlash engine on CPU
    for built in native["built"]:
        assert built["proposer"] == "vllm.v1.spec_decode.dflash.DFlashProposer", built
        assert built["drafter_model"] == "vllm.model_executor.models.qwen3_dflash.DFlashQwen3ForCausalLM", built
        assert built["padded_linears"] == 0, built  # vLLM's own DFlash: untouched
    assert ours["tokens"] == native["tokens"]  # greedy: both equal the target's own output


def test_ours_with_vllms_compiled_target(tiny_dir):
    """Without --enforce-eager vLLM compiles the target on CPU (one trace, symbolic row count):
    our DFlash must start and decode the same greedy tokens. The padded row counts
    (fixes/cpu_gemm_widths.py) broke that trace once (ConstraintViolationError at start-up)."""
    eager, compiled = _run(tiny_dir, native=False), _run(tiny_dir, native=False, eager=False)
    assert compiled["tokens"] == eager["tokens"]
    assert all(b["proposer"] == "dflash_vllm.proposers.dflash.DFlashProposer" for b in compiled["built"])
