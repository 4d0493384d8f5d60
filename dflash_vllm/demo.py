"""``dflash-vllm demo``: the shipped demo pair, served by vLLM, called with the `openai` client.

Starts ``dflash-vllm serve`` on 127.0.0.1 with DFlash, sends held-out task prompts through
the ordinary `openai` client, prints completions, then measures the same prompts against a
server without speculation; reports output tokens/s both ways (same run, same machine), the
speed-up, and DFlash's mean acceptance length tau from the server's /metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEMO_TARGET = os.path.join(REPO, "deploy", "demo", "target")
DEMO_DRAFTER = os.path.join(REPO, "deploy", "demo", "drafter")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`dflash-vllm serve` in a subprocess on 127.0.0.1; a context manager."""

    def __init__(self, target: str, speculative_config: dict | None, extra: list[str] | None = None,
                 env: dict | None = None, log_path: str | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "dflash_vllm.cli", "serve", target, "--host", "127.0.0.1", "--port", str(self.port),
                "--dtype", "float32", "--max-model-len", "1024", "--gpu-memory-utilization", "0.3", "--enforce-eager",
                "--served-model-name", "demo"]
        if speculative_config:
            args += ["--speculative-config", json.dumps(speculative_config)]
        self.args = args + (extra or [])
        self.env = dict(os.environ, **(env or {}))
        self.log_path = log_path or os.path.join("/tmp", f"dflash-vllm-server-{self.port}.log")

    def __enter__(self):
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}); log: {self.log_path}\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(1)
        raise TimeoutError(f"server did not become healthy; log: {self.log_path}\n{self.tail()}")

    def tail(self, n: int = 4000) -> str:
        with open(self.log_path) as f:
            return f.read()[-n:]

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            m = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+([-\d.eE+naif]+)$", line)
            if m:
                key = m.group(1) + (m.group(2) or "")
                out[key] = out.get(key, 0.0) + float(m.group(3))
        return out

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def metric_sum(metrics: dict[str, float], name: str) -> float:
    return sum(v for k, v in metrics.items() if k == name or k.startswith(name + "{"))


def run_prompts(url: str, prompts: list[str], max_tokens: int, concurrency: int) -> tuple[list[str], int, float]:
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="EMPTY")

    def one(p):
        r = client.chat.completions.create(model="demo", messages=[{"role": "user", "content": p}],
                                           max_tokens=max_tokens, temperature=0.0)
        return r.choices[0].message.content, r.usage.completion_tokens

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        results = list(ex.map(one, prompts))
    return [r[0] for r in results], sum(r[1] for r in results), time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dflash-vllm demo", description=__doc__)
    ap.add_argument("--target", default=DEMO_TARGET)
    ap.add_argument("--drafter", default=DEMO_DRAFTER)
    ap.add_argument("--num-speculative-tokens", type=int, default=15)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--show", type=int, default=4, help="completions to print")
    args = ap.parse_args(argv)
    from .training.tasks import make_samples

    samples = make_samples(args.num_prompts, seed=101)
    prompts = [s.prompt for s in samples]
    spec = {"method": "dflash", "model": args.drafter, "num_speculative_tokens": args.num_speculative_tokens}
    print(f"[demo] target {args.target}\n[demo] drafter {args.drafter} (K={args.num_speculative_tokens})", flush=True)
    with Server(args.target, spec) as srv:
        print(f"[demo] DFlash server up at {srv.url}; warming up", flush=True)
        run_prompts(srv.url, prompts[:2], 16, 1)
        before = srv.metrics()
        outs, n_tok, secs = run_prompts(srv.url, prompts, args.max_tokens, args.concurrency)
        after = srv.metrics()
    drafts = metric_sum(after, "vllm:spec_decode_num_drafts_total") - metric_sum(before, "vllm:spec_decode_num_drafts_total")
    accepted = (metric_sum(after, "vllm:spec_decode_num_accepted_tokens_total")
                - metric_sum(before, "vllm:spec_decode_num_accepted_tokens_total"))
    tau = 1 + accepted / drafts if drafts else float("nan")

    def per_step_ms(kind):
        n = metric_sum(after, f"dflash:{kind}_time_seconds_count") - metric_sum(before, f"dflash:{kind}_time_seconds_count")
        t = metric_sum(after, f"dflash:{kind}_time_seconds_sum") - metric_sum(before, f"dflash:{kind}_time_seconds_sum")
        return 1e3 * t / n if n else float("nan")

    draft_ms, verify_ms = per_step_ms("draft"), per_step_ms("verify")
    for s, o in list(zip(samples, outs))[: args.show]:
        print(f"\n>>> {s.prompt}\n{o}")
    with Server(args.target, None) as srv:
        print(f"\n[demo] baseline server (no speculation) up at {srv.url}; warming up", flush=True)
        run_prompts(srv.url, prompts[:2], 16, 1)
        base_outs, base_tok, base_secs = run_prompts(srv.url, prompts, args.max_tokens, args.concurrency)
    correct = sum(s.answer in o for s, o in zip(samples, outs))
    same = sum(a == b for a, b in zip(outs, base_outs))
    print("\n[demo] results (greedy, concurrency %d, %d prompts)" % (args.concurrency, len(prompts)))
    print(f"  DFlash:      {n_tok} tokens in {secs:.2f} s = {n_tok / secs:.1f} tokens/s")
    print(f"  no spec:     {base_tok} tokens in {base_secs:.2f} s = {base_tok / base_secs:.1f} tokens/s")
    print(f"  speed-up:    {(n_tok / secs) / (base_tok / base_secs):.2f}x")
    print(f"  tau (mean acceptance length, from /metrics): {tau:.2f}  ({int(accepted)} accepted / {int(drafts)} drafts)")
    print(f"  per engine step (from /metrics): verify {verify_ms:.2f} ms, draft {draft_ms:.2f} ms")
    print(f"  outputs identical to no speculation: {same}/{len(prompts)}; task answers correct: {correct}/{len(prompts)}")
    return 0 if same == len(prompts) else 1


if __name__ == "__main__":
    sys.exit(main())
