"""The OpenAI-compatible server with our DFlash, called with the real `openai` client on
127.0.0.1, next to a server without speculation on the same demo target."""

import json
import time
import urllib.error
import urllib.request

import pytest

from dflash_vllm.demo import DEMO_DRAFTER, DEMO_TARGET, Server, metric_sum

pytestmark = pytest.mark.e2e
PROMPTS = ["Convert 7 km to m.", "Sort in ascending order: 42, 7, 19, 3", "Format as JSON: name=Ana; age=31; city=Oslo",
           "Tom has 12 apples. Tom gets 7 more apples and gives away 5. How many apples does Tom have now?"]


@pytest.fixture(scope="module")
def servers():
    spec = {"method": "dflash", "model": DEMO_DRAFTER, "num_speculative_tokens": 15}
    with Server(DEMO_TARGET, spec) as ours, Server(DEMO_TARGET, None) as base:
        yield ours, base


def _client(srv):
    from openai import OpenAI

    return OpenAI(base_url=srv.url + "/v1", api_key="EMPTY", max_retries=0)


def _chat(srv, p, **kw):
    return _client(srv).chat.completions.create(model="demo", messages=[{"role": "user", "content": p}], **kw)


def test_chat_greedy_identical(servers):
    ours, base = servers
    for p in PROMPTS:
        a, b = _chat(ours, p, max_tokens=64, temperature=0), _chat(base, p, max_tokens=64, temperature=0)
        assert a.choices[0].message.content == b.choices[0].message.content, p
        assert a.choices[0].finish_reason == b.choices[0].finish_reason == "stop"
    m = ours.metrics()
    assert metric_sum(m, "vllm:spec_decode_num_accepted_tokens_total") > 0


def test_metrics_draft_verify_time_and_tau(servers):
    """/metrics carries per-step draft and verify time histograms and tau, next to vLLM's counters."""
    ours, base = servers
    before = ours.metrics()
    for p in PROMPTS:
        _chat(ours, p, max_tokens=64, temperature=0)
    m = ours.metrics()

    def delta(name):
        return metric_sum(m, name) - metric_sum(before, name)

    drafts = delta("vllm:spec_decode_num_drafts_total")
    assert drafts > 0
    for kind in ("draft", "verify"):
        n, total = delta(f"dflash:{kind}_time_seconds_count"), delta(f"dflash:{kind}_time_seconds_sum")
        assert n >= drafts, (kind, n, drafts)  # one per engine step; each step drafts for every request
        assert 0 < total / n < 5.0, (kind, total, n)
        assert m[f'dflash:{kind}_time_seconds_bucket{{le="+Inf"}}'] == metric_sum(m, f"dflash:{kind}_time_seconds_count")
    tau = m["dflash:mean_acceptance_length"]
    lifetime = 1 + metric_sum(m, "vllm:spec_decode_num_accepted_tokens_total") / metric_sum(m, "vllm:spec_decode_num_drafts_total")
    assert tau == pytest.approx(lifetime, rel=1e-6) and tau > 2.0
    assert not any(k.startswith("dflash:") for k in base.metrics()), "no DFlash series without DFlash"


def test_completions_with_stop_string(servers):
    ours, base = servers
    prompt = "<|user|>\nConvert 7 km to m.\n<|assistant|>\n"
    kw = dict(model="demo", prompt=prompt, max_tokens=64, temperature=0, stop=["\n"])
    a, b = _client(ours).completions.create(**kw), _client(base).completions.create(**kw)
    assert a.choices[0].text == b.choices[0].text == "1 km = 1000 m."
    assert a.choices[0].finish_reason == "stop"


def test_streaming_equals_non_streaming(servers):
    ours, _ = servers
    full = _chat(ours, PROMPTS[1], max_tokens=64, temperature=0).choices[0].message.content
    stream = _chat(ours, PROMPTS[1], max_tokens=64, temperature=0, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == full


def test_n_greater_than_one(servers):
    ours, _ = servers
    r = _chat(ours, PROMPTS[0], max_tokens=32, temperature=1.0, n=3, seed=7)
    assert len(r.choices) == 3 and all(c.message.content for c in r.choices)


def test_logprobs_are_the_targets(servers):
    ours, base = servers
    a = _chat(ours, PROMPTS[2], max_tokens=32, temperature=0, logprobs=True, top_logprobs=2)
    b = _chat(base, PROMPTS[2], max_tokens=32, temperature=0, logprobs=True, top_logprobs=2)
    la, lb = a.choices[0].logprobs.content, b.choices[0].logprobs.content
    assert [t.token for t in la] == [t.token for t in lb]
    assert max(abs(x.logprob - y.logprob) for x, y in zip(la, lb)) < 1e-3


def test_invalid_request_gets_400_and_server_keeps_serving(servers):
    ours, _ = servers
    body = json.dumps({"model": "demo", "messages": [{"role": "user", "content": "hi"}], "temperature": -1}).encode()
    req = urllib.request.Request(ours.url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 400 and "temperature" in e.value.read().decode()
    assert _chat(ours, PROMPTS[0], max_tokens=16, temperature=0).choices[0].message.content


def test_client_disconnect_frees_kv_blocks(servers):
    ours, _ = servers

    def usage():
        return metric_sum(ours.metrics(), "vllm:kv_cache_usage_perc")

    before = usage()
    stream = _chat(ours, PROMPTS[3], max_tokens=900, temperature=1.0, stream=True,
                   extra_body={"ignore_eos": True, "min_tokens": 900})
    for i, _chunk in enumerate(stream):
        if i == 5:
            break
    during = usage()
    stream.close()
    assert during > before, "the streaming request held no KV blocks: the test would prove nothing"
    deadline = time.time() + 30
    while time.time() < deadline and (metric_sum(ours.metrics(), "vllm:num_requests_running") > 0 or usage() > before):
        time.sleep(0.5)
    assert metric_sum(ours.metrics(), "vllm:num_requests_running") == 0, "the aborted request is still running"
    assert usage() <= before, f"KV usage {usage()} did not return to {before}"
    assert _chat(ours, PROMPTS[0], max_tokens=16, temperature=0).choices[0].message.content
