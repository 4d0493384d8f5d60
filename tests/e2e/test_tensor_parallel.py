"""Tensor parallel on CPU: TP=2 through vLLM's multiprocessing executor and through Ray (vLLM
refuses Ray on CPU; dflash_vllm.fixes.ray_cpu makes it run) gives the same greedy outputs as
TP=1 and as no speculation, with the drafter sharded like the target and acceptance intact.

The shipped demo pair (2 KV heads: one per rank), 12 task prompts, continuous batching.
"""

import os

import pytest

from dflash_vllm import paths
from dflash_vllm.prompts import chat_ids
from dflash_vllm.harness import run_job_subprocess

from ..conftest import first_divergence

pytestmark = pytest.mark.e2e
TARGET, DRAFTER = paths.DEMO_TARGET, paths.DEMO_DRAFTER


def _bind() -> str:
    """One core per rank (VLLM_CPU_OMP_THREADS_BIND), from the cores this process may use."""
    cpus = sorted(os.sched_getaffinity(0))
    return f"{cpus[0]}|{cpus[1 % len(cpus)]}"


@pytest.fixture(scope="module")
def runs():
    from transformers import AutoTokenizer

    from dflash_vllm.training.tasks import make_samples

    tok = AutoTokenizer.from_pretrained(TARGET)
    reqs = [{"prompt_token_ids": chat_ids(tok, s.prompt),
             "max_tokens": 80, "stop_token_ids": [tok.eos_token_id], "ignore_eos": False}
            for s in make_samples(12, seed=515)]
    spec = {"method": "dflash", "model": DRAFTER, "num_speculative_tokens": 15, "dflash_fixed_k": 15}  # tau TP1 vs TP2 at one K
    base = {"model": TARGET, "requests": reqs, "engine": {"max_num_seqs": 6, "kv_cache_memory_bytes": 2**27}}
    env1 = {"VLLM_CPU_OMP_THREADS_BIND": _bind().split("|")[0]}
    env2 = {"VLLM_CPU_OMP_THREADS_BIND": _bind()}

    def run(name):  # each engine starts on first use: the default suite skips the `slow` mp runs
        if name in ("nospec", "tp1"):
            return run_job_subprocess(dict(base, speculative_config=None if name == "nospec" else spec), env=env1)
        engine = dict(base["engine"], tensor_parallel_size=2, distributed_executor_backend=name.removeprefix("tp2_"))
        return run_job_subprocess(dict(base, speculative_config=spec, engine=engine), env=env2, timeout=900)

    return _Lazy(run)


class _Lazy(dict):
    def __init__(self, make):
        super().__init__()
        self.make = make

    def __missing__(self, key):
        self[key] = self.make(key)
        return self[key]


# The multiprocessing executor is vLLM's own, exercised by vLLM's tests; Ray is ours to keep working
# on CPU (fixes/ray_cpu.py), so only Ray stays in the default suite (`-m slow` runs both).
MP = pytest.param("mp", marks=pytest.mark.slow)


def _tau(run):
    acc = [a for o in run["outputs"] for a in o["accepted_per_step"]]
    return 1 + sum(acc) / len(acc)


@pytest.mark.parametrize("name", ["tp1", pytest.param("tp2_mp", marks=pytest.mark.slow), "tp2_ray"])
def test_greedy_outputs_identical_to_no_speculation(runs, name):
    for i, (a, b) in enumerate(zip(runs["nospec"]["outputs"], runs[name]["outputs"])):
        assert a["token_ids"] == b["token_ids"], f"{name} request {i}: {first_divergence(a['token_ids'], b['token_ids'])}"


@pytest.mark.parametrize("backend,executor", [pytest.param("mp", "MultiprocExecutor", marks=pytest.mark.slow), ("ray", "CpuRayExecutor")])
def test_tp2_runs_through_the_requested_executor_with_the_drafter_sharded(runs, backend, executor):
    run, one = runs[f"tp2_{backend}"], runs["tp1"]
    assert run["executor"] == executor
    assert len(run["shards"]) == 2
    for rank in run["shards"]:  # each rank holds half the heads, drafter like target
        assert rank["target_qkv"] * 2 == one["shards"][0]["target_qkv"]
        assert rank["drafter_qkv"] * 2 == one["shards"][0]["drafter_qkv"]


@pytest.mark.parametrize("backend", [MP, "ray"])
def test_tp2_acceptance_matches_tp1(runs, backend):
    """A mis-sharded drafter still yields lossless outputs, but its drafts would be rejected."""
    tau1, tau2 = _tau(runs["tp1"]), _tau(runs[f"tp2_{backend}"])
    assert tau1 > 3.0
    assert tau2 >= 0.97 * tau1, (tau1, tau2)


TEARDOWN = '''
import os, sys
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
if __name__ == "__main__":
    import ray
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    llm = LLM(model=sys.argv[1], dtype="float32", enforce_eager=True, kv_cache_memory_bytes=2**27, skip_tokenizer_init=True,
              tensor_parallel_size=2, distributed_executor_backend="ray")
    print("OUT", list(llm.generate([TokensPrompt(prompt_token_ids=[5, 6, 7, 8])],
                                   SamplingParams(max_tokens=4, temperature=0))[0].outputs[0].token_ids), flush=True)
    ray.shutdown()  # Ray's atexit hook can run before the executor's finalizer
    llm.llm_engine.engine_core.shutdown()
    print("SHUTDOWN OK", flush=True)
'''


def test_ray_executor_shutdown_after_ray_session_ended(tmp_path):
    """The teardown order that made a CI run die with SIGSEGV: the executor's shutdown must not
    start a fresh Ray just to kill actors that ended with the old session."""
    import subprocess
    import sys

    script = tmp_path / "teardown.py"
    script.write_text(TEARDOWN)
    env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND=_bind())
    proc = subprocess.run([sys.executable, str(script), TARGET], capture_output=True, text=True, timeout=600, env=env)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "SHUTDOWN OK" in text, text[-3000:]
    assert text.count("Started a local Ray instance") == 1, text[-3000:]
    assert "Failed to kill actor" not in text
