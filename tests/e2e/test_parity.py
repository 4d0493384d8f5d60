"""At batch 1, on identical weights, the per-step accepted-draft counts of our proposer equal
those of vLLM's native DFlash, of our reference loop, and of `dflash_generate` from the PyPI
`dflash` package, over 16 prompts, with a drafter whose acceptance is neither zero nor full.
At batch 8 with one draft per request, ours accepts as often as native (the last test)."""

import random
import time

import pytest
import torch

from dflash_vllm.harness import run_job_subprocess

pytestmark = pytest.mark.e2e
K = 7
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def prompts():
    r = random.Random(7)
    return [[r.randrange(3, 510) for _ in range(r.randint(4, 60))] for _ in range(16)]


@pytest.fixture(scope="module")
def no_last_layer_drafter(trained_tiny_drafter, tmp_path_factory):
    """The same weights reading target layers [1, 2]. `dflash_generate` takes features from HF's
    hidden_states, whose last entry is final-normed, while vLLM hands over the pre-norm
    residual stream: the two agree only for drafters that avoid the target's last layer (as
    the published ones do). Our trained drafter reads layer 3 on purpose, to catch that."""
    import json
    import shutil

    d = tmp_path_factory.mktemp("nolast") / "drafter"
    shutil.copytree(trained_tiny_drafter, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["dflash_config"]["target_layer_ids"] = [1, 2]
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


@pytest.fixture(scope="module")
def engine_runs(tiny_dir, trained_tiny_drafter, no_last_layer_drafter, prompts):
    job = {
        "model": str(tiny_dir / "target"),
        "speculative_config": {"method": "dflash", "model": trained_tiny_drafter, "num_speculative_tokens": K,
                               "dflash_fixed_k": K},  # parity at a fixed K: adaptive drafting off
        "engine": {"max_num_seqs": 1},
        "requests": [{"prompt_token_ids": p, "max_tokens": MAX_TOKENS} for p in prompts],
    }
    runs = {name: run_job_subprocess(dict(job, native=name == "native")) for name in ("ours", "native")}
    job["speculative_config"] = dict(job["speculative_config"], model=no_last_layer_drafter)
    runs["ours_no_last_layer"] = run_job_subprocess(job)
    return runs


@pytest.fixture(scope="module")
def oracle_runs(tiny_dir, trained_tiny_drafter, no_last_layer_drafter, prompts):
    import dflash.model as official
    from transformers import AutoModelForCausalLM

    from dflash_vllm.torch_drafter import DFlashDrafter
    from dflash_vllm.reference import generate

    target = AutoModelForCausalLM.from_pretrained(str(tiny_dir / "target"), dtype=torch.float32).eval()
    ours = DFlashDrafter.from_pretrained(trained_tiny_drafter).eval()
    theirs = official.DFlashDraftModel.from_pretrained(no_last_layer_drafter, dtype=torch.float32).eval()
    official._cuda_time = time.perf_counter  # its stats timer calls torch.cuda.synchronize
    ref, pkg = [], []
    for p in prompts:
        res = generate(target, ours, p, MAX_TOKENS, num_speculative_tokens=K)
        ref.append((res.token_ids, res.accepted))
        o = official.dflash_generate(theirs, target, torch.tensor([p]), MAX_TOKENS, None, block_size=K + 1, return_stats=True)
        pkg.append((o.output_ids[0, len(p):].tolist(), [n - 1 for n in o.acceptance_lengths]))
    return {"reference": ref, "dflash_generate": pkg}


def _compare(name, i, got, want):
    # The last verify step can be cut short by max_tokens differently in each implementation.
    assert got[:-1] == want[:-1], (
        f"prompt {i}: accepted-per-step of {name} differs at step "
        f"{next(j for j, (a, b) in enumerate(zip(got, want)) if a != b)}: {got} vs {want}"
    )


def test_acceptance_is_neither_zero_nor_full(engine_runs):
    acc = [x for o in engine_runs["ours"]["outputs"] for x in o["accepted_per_step"]]
    assert 0 < sum(acc) < K * len(acc), f"acceptance {sum(acc)}/{K * len(acc)}"


def test_ours_equals_native(engine_runs):
    assert "DFLASH_VLLM_NATIVE=1" in engine_runs["native"]["log"]
    for i, (a, b) in enumerate(zip(engine_runs["ours"]["outputs"], engine_runs["native"]["outputs"])):
        assert a["token_ids"] == b["token_ids"], f"prompt {i}: outputs differ"
        assert a["accepted_per_step"] == b["accepted_per_step"], (
            f"prompt {i}: ours {a['accepted_per_step']} vs native {b['accepted_per_step']}")


def _full_steps(accepted: list[int]) -> int:
    """Steps that verified a whole K+1 block: `dflash_generate` shrinks the block near max_tokens."""
    produced, n = 1, 0
    for a in accepted:
        if produced > MAX_TOKENS - K:
            break
        produced, n = produced + a + 1, n + 1
    return n


@pytest.mark.parametrize("oracle", ["reference", "dflash_generate"])
def test_ours_equals_oracles(engine_runs, oracle_runs, oracle):
    ours = engine_runs["ours" if oracle == "reference" else "ours_no_last_layer"]["outputs"]
    if oracle == "dflash_generate":
        acc = [x for o in ours for x in o["accepted_per_step"]]
        assert sum(acc) > 0, "the no-last-layer variant is never accepted: the comparison says nothing"
    for i, (o, (tokens, accepted)) in enumerate(zip(ours, oracle_runs[oracle])):
        assert o["token_ids"] == tokens[:MAX_TOKENS], f"prompt {i}: tokens differ from {oracle}"
        if oracle == "reference":
            assert len(o["accepted_per_step"]) == len(accepted), f"prompt {i}: step counts differ from {oracle}"
            _compare(oracle, i, o["accepted_per_step"], accepted)
        else:
            n = _full_steps(accepted)
            assert n >= 3
            assert o["accepted_per_step"][:n] == accepted[:n], (
                f"prompt {i}: ours {o['accepted_per_step'][:n]} vs {oracle} {accepted[:n]}")



@pytest.fixture(scope="module")
def batched_one_draft_runs(demo_workload):
    """One draft per request (a two-row block) with 8 requests in flight, ours and native, on the
    demo pair and its task prompts (first draft accepted ~93 % of the time: the tiny pair's
    drafter accepts too rarely to tell a defect from noise)."""
    from dflash_vllm import paths

    job = {
        "model": str(paths.DEMO_TARGET),
        "speculative_config": {"method": "dflash", "model": str(paths.DEMO_DRAFTER), "num_speculative_tokens": 1,
                               "dflash_adaptive": False},
        "engine": {"max_num_seqs": 8},
        "requests": demo_workload,
    }
    return {name: run_job_subprocess(dict(job, native=name == "native")) for name in ("ours", "native")}


def test_one_draft_per_request_in_a_batch_is_accepted_as_often_as_natives(batched_one_draft_runs):
    """The batch-1 tests above cannot see a defect that mixes requests: at K = 1 the last
    layer's mask rows were a strided view that vLLM's C++ add-RMSNorm read as contiguous, and
    every request after the first drafted from another's rows (demo pair, batch 8: tau 1.38
    against native's 1.93). Outputs stay identical either way; the accepted drafts tell."""
    ours, native = (batched_one_draft_runs[n]["outputs"] for n in ("ours", "native"))
    assert [o["token_ids"] for o in ours] == [o["token_ids"] for o in native]
    acc = {n: sum(x for o in batched_one_draft_runs[n]["outputs"] for x in o["accepted_per_step"] or [])
           for n in ("ours", "native")}
    assert acc["native"] > 0, "native accepted nothing: the comparison says nothing"
    assert acc["ours"] >= 0.95 * acc["native"], f"accepted drafts: ours {acc['ours']}, native {acc['native']}"
