"""``dflash-vllm soak``: a bounded load test of a DFlash server next to a no-speculation server.

    dflash-vllm soak [--minutes 30] [--concurrency 64] [--out bench/results/soak.json]

Starts both servers on 127.0.0.1 (same target; the DFlash one with the drafter), then for a
fixed time keeps ``--concurrency`` requests in flight against each, from the same request
sequence: greedy chat (plain, streamed, with a stop string), sampled chat (T=1, top-p 0.95),
seeded sampled requests (long token-id prompts, so prefill is chunked: the vLLM CPU crash of
fixes/cpu_seeded_chunks.py), and streams the client abandons after three chunks. It opens with
the burst that used to kill the server (12 concurrent seeded requests with ~775-token prompts).

Reports per minute and server: requests, errors, end-to-end latency p50/p99, RSS of the server's
process tree; at the end: greedy mismatches between the two servers (and between repeats of one
request on one server), seeded repeats that differ, tau from /metrics, whether both servers
are still alive. Loopback only; every loop is bounded by the duration and a per-request timeout.
Exit status 0 when there were no errors and no greedy mismatches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import threading
import time
from dataclasses import dataclass

import psutil

from .acceptance import tau_from_counters
from .options import add_options, opt, parse_into
from .bench.runner import provenance
from .demo import DEMO_DRAFTER, DEMO_TARGET, Server, metric_sum

KINDS = ("greedy", "greedy", "greedy_stream", "greedy_stop", "sampled", "sampled_stream", "seeded_long",
         "seeded_long", "seeded_stream", "cancelled")
GREEDY = ("greedy", "greedy_stream", "greedy_stop")
REQUEST_TIMEOUT_S = 180


def _prompts(target: str):
    from transformers import AutoTokenizer

    from .prompts import conversations

    chats = conversations("tasks", 24) + conversations("chat", 16) + conversations("code", 8)
    vocab = len(AutoTokenizer.from_pretrained(target))
    r = random.Random(11)
    long_ids = [[r.randrange(5, vocab - 5) for _ in range(r.randint(200, 800))] for _ in range(24)]
    return chats, long_ids


def _request(i: int, chats, long_ids) -> dict:
    """Request i of the sequence (the same for both servers): a dict of what to send and how."""
    kind = KINDS[i % len(KINDS)]
    req = {"i": i, "kind": kind, "key": None}
    if kind.startswith("seeded_long"):
        j = (i // len(KINDS)) % len(long_ids)
        req.update(api="completions", prompt=long_ids[j], max_tokens=32, temperature=1.0, seed=1000 + j)
        req["key"] = ("seeded", j)
        return req
    j = (i // len(KINDS) + i) % len(chats)
    req.update(api="chat", messages=chats[j], max_tokens=64)
    if kind in GREEDY:
        req.update(temperature=0.0)
        if kind == "greedy_stop":
            req["stop"] = ["\n"]
        req["key"] = (kind.replace("_stream", ""), j)
    elif kind == "seeded_stream":
        req.update(temperature=1.0, top_p=0.95, seed=2000 + j)
        req["key"] = ("seeded_chat", j)
    else:
        req.update(temperature=1.0, top_p=0.95)
    req["stream"] = kind.endswith("_stream") or kind == "cancelled"
    return req


def _send(client, req: dict) -> str:
    kw = {k: req[k] for k in ("max_tokens", "temperature", "top_p", "seed", "stop") if k in req}
    if req["api"] == "completions":
        return client.completions.create(model="demo", prompt=req["prompt"], **kw).choices[0].text
    if not req.get("stream"):
        return client.chat.completions.create(model="demo", messages=req["messages"], **kw).choices[0].message.content
    stream = client.chat.completions.create(model="demo", messages=req["messages"], stream=True, **kw)
    parts = []
    for n, chunk in enumerate(stream):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        if req["kind"] == "cancelled" and n >= 2:
            stream.close()  # the client goes away mid-generation
            break
    return "".join(parts)


class _Load:
    """One server under closed-loop load: `concurrency` workers until the deadline."""

    def __init__(self, name: str, srv: Server, concurrency: int, chats, long_ids):
        import httpx
        from openai import OpenAI

        self.name, self.srv, self.concurrency = name, srv, concurrency
        # No retries: every failure counts. Idle keep-alive connections are dropped after 2 s, before
        # uvicorn's 5 s keep-alive closes them from the server side: with equal timeouts a request
        # can go out on a connection the server is closing ("Connection error", seen 5 times in
        # 31,790 requests of a 30-minute run), a client-side race that says nothing of the server.
        http = httpx.Client(limits=httpx.Limits(max_connections=2 * concurrency, keepalive_expiry=2.0),
                            timeout=REQUEST_TIMEOUT_S)
        self.client = OpenAI(base_url=srv.url + "/v1", api_key="EMPTY", max_retries=0, http_client=http)
        self.chats, self.long_ids = chats, long_ids
        self.next_i = 0
        self.lock = threading.Lock()
        self.records: list[tuple[float, float, str, bool]] = []  # (t_end, latency, kind, ok)
        self.errors: list[str] = []
        self.outputs: dict[tuple, list[str]] = {}
        self.rss: list[tuple[float, float]] = []
        self.rss_by_process: list[tuple[float, dict[str, float]]] = []  # which process grows

    def _take(self) -> int:
        with self.lock:
            self.next_i += 1
            return self.next_i - 1

    def one(self, req: dict, t0: float) -> None:
        start = time.perf_counter()
        try:
            text = _send(self.client, req)
            ok = True
        except Exception as e:  # noqa: BLE001 - every failure is counted and reported, none stops the soak
            ok, text = False, None
            with self.lock:
                cause = f" (cause: {e.__cause__!r})"[:200] if e.__cause__ is not None else ""
                self.errors.append(f"{req['kind']} #{req['i']}: {type(e).__name__}: {str(e)[:200]}{cause}")
        end = time.perf_counter()
        with self.lock:
            self.records.append((end - t0, end - start, req["kind"], ok))
            if ok and req["key"] is not None:
                self.outputs.setdefault(req["key"], []).append(text)

    def worker(self, t0: float, deadline: float) -> None:
        while time.perf_counter() < deadline:
            self.one(_request(self._take(), self.chats, self.long_ids), t0)

    def sample_rss(self, t0: float) -> None:
        try:
            root = psutil.Process(self.srv.proc.pid)
            procs = [root, *root.children(recursive=True)]
            total, parts = 0, {}
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    name = "api_server" if p.pid == root.pid else p.name()
                except psutil.Error:
                    continue
                total += rss
                parts[name] = parts.get(name, 0.0) + rss / 2**20
            self.rss.append((time.perf_counter() - t0, total / 2**20))
            self.rss_by_process.append((time.perf_counter() - t0, parts))
        except psutil.Error:
            self.rss.append((time.perf_counter() - t0, float("nan")))


def _burst(load: _Load, t0: float) -> None:
    """12 concurrent seeded T=1 requests with distinct ~775-token prompts (the old crash)."""
    r = random.Random(5)
    vocab = max(max(p) for p in load.long_ids) + 1
    reqs = [{"i": -1 - k, "kind": "seed_burst", "key": ("burst", k), "api": "completions",
             "prompt": [r.randrange(5, vocab) for _ in range(775)], "max_tokens": 32, "temperature": 1.0,
             "seed": 500 + k} for k in range(12)]
    threads = [threading.Thread(target=load.one, args=(q, t0)) for q in reqs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _summary(load: _Load, minutes: float) -> dict:
    per_minute = []
    for m in range(int(minutes + 0.999)):
        rows = [r for r in load.records if m * 60 <= r[0] < (m + 1) * 60]
        lat = [r[1] for r in rows if r[3]]
        rss = [x for t, x in load.rss if m * 60 <= t < (m + 1) * 60]
        parts = [x for t, x in load.rss_by_process if m * 60 <= t < (m + 1) * 60]
        per_minute.append({"minute": m + 1, "requests": len(rows), "errors": sum(not r[3] for r in rows),
                           "p50_s": round(_percentile(lat, 0.5), 3), "p99_s": round(_percentile(lat, 0.99), 3),
                           "rss_mib": round(statistics.mean(rss), 1) if rss else None,
                           "rss_mib_by_process": {n: round(statistics.mean(p.get(n, 0.0) for p in parts), 1)
                                                  for n in sorted({n for p in parts for n in p})}})
    repeat_mismatch = sum(len(set(v)) > 1 for k, v in load.outputs.items() if k[0] in ("greedy", "greedy_stop"))
    seeded_repeat_diff = sum(len(set(v)) > 1 for k, v in load.outputs.items() if k[0].startswith("seeded"))
    return {"requests": len(load.records), "errors": len(load.errors), "error_samples": load.errors[:10],
            "by_kind": {k: sum(r[2] == k for r in load.records) for k in sorted({r[2] for r in load.records})},
            "greedy_repeat_mismatches": repeat_mismatch, "seeded_repeats_that_differ": seeded_repeat_diff,
            "alive_at_end": load.srv.proc.poll() is None, "per_minute": per_minute}


def _rss_flatness(per_minute: list[dict], last: int) -> float | None:
    xs = [m["rss_mib"] for m in per_minute[-last:] if m["rss_mib"] is not None]
    if len(xs) < 2:
        return None
    return (max(xs) - min(xs)) / statistics.mean(xs)


def run(target: str, drafter: str, k: int, minutes: float, concurrency: int, log_dir: str,
        kv_cache_mib: int = 1024, server_env: dict | None = None) -> dict:
    chats, long_ids = _prompts(target)
    spec = {"method": "dflash", "model": drafter, "num_speculative_tokens": k}
    os.makedirs(log_dir, exist_ok=True)
    # A fixed KV pool: on CPU the default is a fraction of RAM, touched page by page as load grows,
    # which two servers side by side on one machine cannot afford (and which reads as RSS growth).
    extra = ["--kv-cache-memory-bytes", str(kv_cache_mib * 2**20)]
    env = dict(server_env or {})
    with Server(target, spec, extra=extra, env=env, log_path=os.path.join(log_dir, "soak-dflash.log")) as ours, \
            Server(target, None, extra=extra, env=env, log_path=os.path.join(log_dir, "soak-none.log")) as base:
        loads = [_Load("dflash", ours, concurrency, chats, long_ids), _Load("none", base, concurrency, chats, long_ids)]
        t0 = time.perf_counter()
        for load in loads:
            _burst(load, t0)
        deadline = time.perf_counter() + 60 * minutes
        t0 = time.perf_counter()  # minutes count from the start of the steady load
        threads = [threading.Thread(target=load.worker, args=(t0, deadline), daemon=True)
                   for load in loads for _ in range(concurrency)]
        for t in threads:
            t.start()
        while time.perf_counter() < deadline:
            for load in loads:
                load.sample_rss(t0)
            time.sleep(min(10.0, max(0.0, deadline - time.perf_counter())))
        for t in threads:
            t.join(timeout=REQUEST_TIMEOUT_S + 10)
        for load in loads:
            load.sample_rss(t0)
        metrics = ours.metrics()
        result = {load.name: _summary(load, minutes) for load in loads}
    drafts = metric_sum(metrics, "vllm:spec_decode_num_drafts_total")
    accepted = metric_sum(metrics, "vllm:spec_decode_num_accepted_tokens_total")
    greedy_keys = [key for key in loads[0].outputs if key[0] in ("greedy", "greedy_stop") and key in loads[1].outputs]
    mismatches = [key for key in greedy_keys if set(loads[0].outputs[key]) != set(loads[1].outputs[key])]
    last = min(20, max(2, int(minutes) - 1))
    return {
        "config": {"target": target, "drafter": drafter, "num_speculative_tokens": k, "minutes": minutes,
                   "concurrency": concurrency, "kv_cache_mib": kv_cache_mib, "server_env": env, "mix": list(KINDS), "request_timeout_s": REQUEST_TIMEOUT_S},
        "servers": result,
        "greedy_compared": len(greedy_keys), "greedy_mismatches": len(mismatches),
        "mismatch_samples": [list(map(str, key)) for key in mismatches[:5]],
        "tau": tau_from_counters(accepted, drafts),
        "rss_flatness_last_minutes": last,
        "rss_flatness": {name: _rss_flatness(s["per_minute"], last) for name, s in result.items()},
        "provenance": provenance(),
    }


def print_report(res: dict) -> None:
    cfg = res["config"]
    print(f"[soak] {cfg['minutes']} min at concurrency {cfg['concurrency']} per server, K={cfg['num_speculative_tokens']}")
    print("minute | " + " | ".join(f"{n}: req err p50 p99 RSS(MiB)" for n in res["servers"]))
    for rows in zip(*(s["per_minute"] for s in res["servers"].values())):
        print(f"{rows[0]['minute']:>6} | " + " | ".join(
            f"{r['requests']:>5} {r['errors']:>3} {r['p50_s']:>6.2f} {r['p99_s']:>6.2f} {r['rss_mib'] or 0:>8.0f}" for r in rows))
    for name, s in res["servers"].items():
        flat = res["rss_flatness"][name]
        print(f"[soak] {name}: {s['requests']} requests, {s['errors']} errors, alive {s['alive_at_end']}, "
              f"greedy repeats differing {s['greedy_repeat_mismatches']}, seeded repeats differing "
              f"{s['seeded_repeats_that_differ']}, RSS spread over the last {res['rss_flatness_last_minutes']} min "
              f"{'n/a' if flat is None else f'{100 * flat:.1f}%'}")
        for e in s["error_samples"]:
            print(f"    error: {e}")
    print(f"[soak] greedy outputs compared across servers: {res['greedy_compared']}, mismatches {res['greedy_mismatches']}; "
          f"tau {res['tau'] if res['tau'] is None else round(res['tau'], 2)}")


@dataclass
class SoakOptions:
    target: str = opt(DEMO_TARGET, "target model directory")
    drafter: str = opt(DEMO_DRAFTER, "DFlash drafter directory")
    num_speculative_tokens: int = opt(15, "drafts per step (K)")
    minutes: float = opt(30.0, "how long the load runs")
    concurrency: int = opt(64, "requests in flight per server")
    kv_cache_mib: int = opt(1024, "KV pool per server")
    server_env: list[str] = opt([], "environment variable for both servers (repeatable), e.g. MALLOC_ARENA_MAX=2",
                                metavar="NAME=VALUE")
    out: str | None = opt(None, "result JSON (default: print only)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="dflash-vllm soak", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(ap, SoakOptions)
    args = parse_into(SoakOptions, ap.parse_args(argv))
    bad_env = [e for e in args.server_env if "=" not in e or not e.split("=", 1)[0]]
    if bad_env:
        ap.error(f"--server-env takes NAME=VALUE, got {bad_env[0]!r}")
    server_env = dict(e.split("=", 1) for e in args.server_env)
    log_dir = os.path.join(os.path.dirname(os.path.abspath(args.out)) if args.out else "/tmp", "soak-logs")
    res = run(args.target, args.drafter, args.num_speculative_tokens, args.minutes, args.concurrency, log_dir,
              args.kv_cache_mib, server_env)
    print_report(res)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        print(f"[soak] wrote {args.out}")
    bad = res["greedy_mismatches"] + sum(s["errors"] + s["greedy_repeat_mismatches"] + (not s["alive_at_end"])
                                         for s in res["servers"].values())
    return 0 if bad == 0 else 1
