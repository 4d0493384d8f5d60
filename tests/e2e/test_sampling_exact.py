"""Speculative sampling through the vLLM engine is exact: the law of the first three generated
tokens with our DFlash equals the target's own law, computed exactly by enumeration.

Test: for each of the 3 positions, a G-test of the observed token counts against the exact
marginal law at that position; the configuration is rejected when any position's p-value is
below 0.01/3 (Bonferroni: family-wise significance 0.01). The sample size N is chosen in the
test so that the power against a total-variation distance of 0.03 is >= 0.9, estimated by
simulation against the least favourable shift we consider (0.03 of mass moved between the two
most likely tokens of a position, where a shift is hardest to see). The drafter proposes badly
on purpose (zeroed final norm: uniform q, argmax token 0), so most drafts are rejected and the
residual path carries the law. A deliberately broken sampler (rejections resampled from p, not
from the residual) must fail the same test.
"""

import random

import numpy as np
import pytest
import torch

from dflash_vllm.harness import run_job_subprocess

pytestmark = pytest.mark.e2e
ALPHA = 0.01
PROMPT = [5, 17, 33, 2, 41, 9]
K = 3
CONFIGS = {
    "t0.7": dict(temperature=0.7),
    "t1.0": dict(temperature=1.0),
    "t1.0_p0.9_k20": dict(temperature=1.0, top_p=0.9, top_k=20),
}


@pytest.fixture(scope="module")
def small_pair(tmp_path_factory):
    from safetensors.torch import load_file, save_file

    from dflash_vllm.tiny import make_tiny_drafter, make_tiny_target

    d = tmp_path_factory.mktemp("small")
    make_tiny_target(str(d / "target"), vocab_size=64, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                     head_dim=32, init_std=0.12, seed=3)
    make_tiny_drafter(str(d / "drafter"), str(d / "target"), target_layer_ids=[0, 1])
    weights = load_file(str(d / "drafter" / "model.safetensors"))
    weights["norm.weight"].zero_()  # every mask slot's logits are 0: q uniform, greedy draft = token 0
    save_file(weights, str(d / "drafter" / "model.safetensors"))
    return d


def _law(logits, cfg):
    from dflash_vllm.reference import sampling_probs

    return sampling_probs(logits, cfg["temperature"], cfg.get("top_p", 1.0), cfg.get("top_k", 0)).double()


@pytest.fixture(scope="module")
def exact_marginals(small_pair):
    """Exact marginal laws of generated positions 1..3 by enumerating the target."""
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(str(small_pair / "target"), dtype=torch.float32).eval()
    v = target.config.vocab_size
    out = {}
    with torch.no_grad():
        l1 = target(torch.tensor([PROMPT])).logits[0, -1]
        y1 = torch.arange(v)[:, None]
        l2 = target(torch.cat([torch.tensor(PROMPT).expand(v, -1), y1], 1)).logits[:, -1]  # [v, V]
        y12 = torch.cartesian_prod(torch.arange(v), torch.arange(v))  # [v*v, 2]
        l3 = target(torch.cat([torch.tensor(PROMPT).expand(v * v, -1), y12], 1)).logits[:, -1]  # [v*v, V]
    for name, cfg in CONFIGS.items():
        p1, p2, p3 = _law(l1, cfg), _law(l2, cfg), _law(l3, cfg)
        joint12 = p1[:, None] * p2  # [y1, y2]
        m2 = joint12.sum(0)
        m3 = (joint12.reshape(-1, 1) * p3).sum(0)
        out[name] = [p1.numpy(), m2.numpy(), m3.numpy()]
    return out


def g_test_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    support = probs > 0
    if counts[~support].sum() > 0:
        return 0.0  # a token the target law forbids was emitted
    n = counts.sum()
    expected = n * probs[support]
    obs = counts[support]
    g = 2.0 * float(np.sum(np.where(obs > 0, obs * np.log(np.maximum(obs, 1) / expected), 0.0)))
    df = int(support.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(g / 2, dtype=torch.float64)))


def rejects(samples: np.ndarray, marginals, vocab: int) -> tuple[bool, list[float]]:
    pvals = [g_test_pvalue(np.bincount(samples[:, i], minlength=vocab), marginals[i]) for i in range(3)]
    return min(pvals) < ALPHA / 3, pvals


def simulated_power(marginals, n: int, sims: int = 300, seed: int = 0) -> float:
    """Power against the least favourable 0.03-TV shift (between the two most likely tokens)."""
    rng = np.random.default_rng(seed)
    worst = 1.0
    for m in marginals:
        alt = m.copy()
        top2 = np.argsort(m)[-2:]
        shift = min(0.03, alt[top2[0]])
        alt[top2[0]] -= shift
        alt[top2[1]] += shift
        alt = np.clip(alt, 0, None) / np.clip(alt, 0, None).sum()
        hits = sum(g_test_pvalue(rng.multinomial(n, alt), m) < ALPHA / 3 for _ in range(sims))

        worst = min(worst, hits / sims)
    return worst


def sample_size(marginals) -> tuple[int, float]:
    n = 3000
    while True:
        power = simulated_power(marginals, n)
        if power >= 0.9 or n >= 48000:
            return n, power
        n = int(n * 1.5)


def engine_samples(pair, cfg, n, preload=(), adaptive=False):
    """K drafts every step unless ``adaptive`` (then the policy decides; the add-on's default on CPU)."""
    spec = {"method": "dflash", "model": str(pair / "drafter"), "num_speculative_tokens": K,
            "draft_sample_method": "probabilistic", "dflash_adaptive": adaptive}
    reqs = [{"prompt_token_ids": PROMPT, "max_tokens": 3, **cfg} for _ in range(n)]
    out = run_job_subprocess({"model": str(pair / "target"), "speculative_config": spec, "requests": reqs,
                              "preload": list(preload), "engine": {"max_num_seqs": 256, "max_model_len": 64}},
                             timeout=1500)
    toks = np.array([o["token_ids"] for o in out["outputs"]])
    accepted = sum(sum(o["accepted_per_step"] or []) for o in out["outputs"])
    return toks, accepted


@pytest.mark.parametrize("name", list(CONFIGS))
def test_speculative_sampling_matches_exact_law(small_pair, exact_marginals, name):
    marginals = exact_marginals[name]
    n, power = sample_size(marginals)
    assert power >= 0.9, f"N={n} gives power {power:.2f} < 0.9 against TV 0.03"
    samples, accepted = engine_samples(small_pair, CONFIGS[name], n)
    assert samples.shape == (n, 3)
    rejected, pvals = rejects(samples, marginals, 64)
    assert not rejected, f"{name}: output law differs from the target's (N={n}, p-values {pvals}, alpha {ALPHA}/3)"
    print(f"{name}: N={n} power={power:.2f} p-values={pvals} accepted drafts={accepted}")
    assert accepted > 0, "no draft was ever accepted: the acceptance path went untested"


def test_speculative_sampling_matches_exact_law_with_the_adaptive_policy(small_pair, exact_marginals):
    """The same G-test with the adaptive policy choosing 0..K drafts per request per step."""
    marginals = exact_marginals["t0.7"]
    n, _ = sample_size(marginals)
    samples, accepted = engine_samples(small_pair, CONFIGS["t0.7"], n, adaptive=True)
    rejected, pvals = rejects(samples, marginals, 64)
    assert not rejected, f"adaptive: output law differs from the target's (N={n}, p-values {pvals}, alpha {ALPHA}/3)"
    print(f"adaptive: N={n} p-values={pvals} accepted drafts={accepted}")
    assert accepted > 0, "no draft was ever accepted: the acceptance path went untested"


def test_broken_sampler_is_caught(small_pair, exact_marginals):
    marginals = exact_marginals["t0.7"]
    n, _ = sample_size(marginals)
    samples, _ = engine_samples(small_pair, CONFIGS["t0.7"], n, preload=["tests.e2e.broken_sampler"])
    rejected, pvals = rejects(samples, marginals, 64)
    print(f"broken sampler: N={n} p-values={pvals}")
    assert rejected, f"a sampler that resamples from p passed the exactness test (p-values {pvals})"


def test_mixed_batch_greedy_and_sampled(small_pair, exact_marginals):
    """Greedy and sampled requests share batches: greedy ones still follow the argmax, the
    sampled ones still follow the exact law (same G-test as above)."""
    marginals = exact_marginals["t0.7"]
    n, _ = sample_size(marginals)
    spec = {"method": "dflash", "model": str(small_pair / "drafter"), "num_speculative_tokens": K,
            "draft_sample_method": "probabilistic"}
    reqs = []
    for i in range(n):
        reqs.append({"prompt_token_ids": PROMPT, "max_tokens": 3, "temperature": 0.7})
        if i % 8 == 0:
            reqs.append({"prompt_token_ids": PROMPT, "max_tokens": 3, "temperature": 0.0})
    out = run_job_subprocess({"model": str(small_pair / "target"), "speculative_config": spec, "requests": reqs,
                              "engine": {"max_num_seqs": 256, "max_model_len": 64}}, timeout=1500)
    greedy = [o["token_ids"] for r, o in zip(reqs, out["outputs"]) if r["temperature"] == 0.0]
    sampled = np.array([o["token_ids"] for r, o in zip(reqs, out["outputs"]) if r["temperature"] > 0])
    argmax = [int(np.argmax(m)) for m in exact_marginals["t0.7"][:1]]
    assert all(g == greedy[0] for g in greedy), "greedy requests disagree with each other in a mixed batch"
    assert greedy[0][0] == argmax[0], "a greedy request did not take the target's argmax"
    rejected, pvals = rejects(sampled, marginals, 64)
    assert not rejected, f"sampled requests in mixed batches deviate from the exact law: p-values {pvals}"


def test_seeded_requests_reproducible_and_logprobs_are_the_targets(small_pair):
    spec = {"method": "dflash", "model": str(small_pair / "drafter"), "num_speculative_tokens": K,
            "draft_sample_method": "probabilistic"}
    r = random.Random(5)
    reqs = [{"prompt_token_ids": [r.randrange(3, 60) for _ in range(8)], "max_tokens": 24, "temperature": 1.0,
             "seed": i, "logprobs": 0} for i in range(24)]
    job = {"model": str(small_pair / "target"), "speculative_config": spec, "requests": reqs,
           "engine": {"max_num_seqs": 8, "max_model_len": 64}}
    # Different engine seeds: only the per-request seeds can make the two runs agree.
    a = run_job_subprocess(job)
    b = run_job_subprocess(dict(job, engine=dict(job["engine"], seed=1234)))
    assert [o["token_ids"] for o in a["outputs"]] == [o["token_ids"] for o in b["outputs"]], "seeded runs differ"
    # Logprobs returned with speculation are the target's: recompute them with the target itself.
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(str(small_pair / "target"), dtype=torch.float32).eval()
    for req, o in zip(reqs[:8], a["outputs"][:8]):
        ids = torch.tensor([req["prompt_token_ids"] + o["token_ids"]])
        with torch.no_grad():
            logp = target(ids).logits[0].float().log_softmax(-1)
        n = len(req["prompt_token_ids"])
        want = [logp[n - 1 + j, t].item() for j, t in enumerate(o["token_ids"])]
        got = o["logprobs"]
        assert got is not None and max(abs(x - y) for x, y in zip(got, want)) < 1e-3, (got[:4], want[:4])
