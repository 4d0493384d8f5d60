"""`dflash-vllm bench run`: methods x concurrency x prompt sets on one target, in one run.

Every method gets its own engine process (started and warmed once, kept alive); for every cell
(prompt set, concurrency) all methods run the same requests back to back, in an order rotated
from cell to cell, so machine drift hits all methods alike and every ratio (speed-up over no
speculation, ours over native) comes from neighbouring measurements. Greedy outputs of every
method are checked against no speculation, cell by cell.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys
import time

from . import report
from ..prompts import prompt_set



class Worker:
    """One method's engine in its own process (`python -m dflash_vllm.bench.worker`)."""

    def __init__(self, name: str, cfg: dict, log_path: str):
        self.name, self.log_path = name, log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "dflash_vllm.bench.worker", json.dumps(cfg)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.hello = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            self.log.flush()
            with open(self.log_path) as f:
                tail = f.read()[-3000:]
            raise RuntimeError(f"bench: the {self.name} engine exited (code {self.proc.returncode}); "
                               f"log {self.log_path}:\n{tail}")
        return json.loads(line)

    def call(self, cmd: dict) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        res = self._read()
        if "error" in res:
            raise RuntimeError(f"bench: {self.name} failed on {cmd['cmd']}: {res['error']} (log {self.log_path})")
        return res

    def close(self) -> None:
        try:
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        except Exception:
            self.proc.kill()
        self.log.close()


FIXED_PREFIX = "ours@k="
REPLICA = "#"


def replica_of(method: str) -> str:
    """The method a replica runs: ``none#2`` -> ``none`` (the same configuration in an engine
    process of its own, to measure how far two processes of one method read apart)."""
    return method.split(REPLICA, 1)[0]


def parse_methods(spec: str) -> list[str]:
    """"none,ours,ours@k=1,3,7,15,native" -> none, ours, ours@k=1, ours@k=3, ours@k=7, ours@k=15,
    native: bare numbers after an ``ours@k=N`` entry are more fixed-K variants. ``METHOD#N``
    (N >= 2) is a replica of METHOD: its configuration in another engine process."""
    out: list[str] = []
    for tok in (t.strip() for t in spec.split(",")):
        if not tok:
            continue
        if tok.isdigit() and out and out[-1].startswith(FIXED_PREFIX):
            tok = FIXED_PREFIX + tok
        base, _, rep = tok.partition(REPLICA)
        if _ and (not rep.isdigit() or int(rep) < 2 or not base):
            raise SystemExit(f"dflash-vllm bench: bad method {tok!r}: a replica is METHOD#N, N >= 2 (e.g. none#2)")
        if base.startswith(FIXED_PREFIX) and not base[len(FIXED_PREFIX):].isdigit():
            raise SystemExit(f"dflash-vllm bench: bad method {tok!r}: use ours@k=N (N = 0, 1, ...)")
        if tok not in out:
            out.append(tok)
    return out


def method_configs(args) -> dict[str, dict]:
    dflash = {"method": "dflash", "model": args.drafter, "num_speculative_tokens": args.k}
    if args.draft_sample_method:
        dflash["draft_sample_method"] = args.draft_sample_method
    table = {
        "none": {"speculative_config": None},
        "ours": {"speculative_config": {**dflash, "dflash_adaptive": False}},  # K every step (native's way)
        "ours@adaptive": {"speculative_config": {**dflash, "dflash_adaptive": True}},
        "native": {"speculative_config": dict(dflash), "native": True},
        "ngram": {"speculative_config": {"method": "ngram", "num_speculative_tokens": args.ngram_k,
                                         "prompt_lookup_max": 4, "prompt_lookup_min": 2}},
    }
    if args.eagle3:
        table["eagle3"] = {"speculative_config": {"method": "eagle3", "model": args.eagle3,
                                                  "num_speculative_tokens": args.eagle3_k}}
    methods = parse_methods(args.methods)
    for m in methods:
        base = replica_of(m)
        if base.startswith(FIXED_PREFIX):
            n = int(base[len(FIXED_PREFIX):])
            # K pinned: the drafter block is N + 1 (as a fixed num_speculative_tokens = N engine
            # has always run); K = 0 keeps --k slots and skips every drafter forward.
            table[base] = {"speculative_config": {**dflash, "num_speculative_tokens": n or args.k, "dflash_fixed_k": n}}
    for m in methods:
        if m != replica_of(m) and replica_of(m) in table:
            table[m] = table[replica_of(m)]
    if args.eagle3 and "eagle3" not in methods:
        methods.append("eagle3")
    unknown = [m for m in methods if m not in table]
    if unknown:
        raise SystemExit(f"dflash-vllm bench: unknown method(s) {unknown}; choose from {sorted(table)} "
                         "(eagle3 needs --eagle3 PATH)")
    if "none" not in methods:
        methods.insert(0, "none")  # every speed-up is a ratio to no speculation in the same run
    return {m: table[m] for m in methods}


def checkpoint_bytes(path: str | None, element_size: int) -> int:
    """Parameters in a drafter checkpoint (the target's embedding/LM head are not in a DFlash
    checkpoint), at the serving dtype's element size."""
    if not path or not os.path.isdir(path):
        return 0
    from safetensors import safe_open

    n = 0
    for f in sorted(os.listdir(path)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(path, f), framework="pt") as st:
                for key in st.keys():
                    numel = 1
                    for d in st.get_slice(key).get_shape():
                        numel *= d
                    n += numel
    return n * element_size


def engine_kwargs(args, max_conc: int, n_methods: int) -> dict:
    import torch

    cuda = torch.cuda.is_available()
    kw = dict(seed=0, max_model_len=args.max_model_len, max_num_seqs=max_conc, skip_tokenizer_init=True,
              disable_log_stats=True)
    if cuda:  # all engines share the one device
        kw.update(gpu_memory_utilization=round(0.85 / n_methods, 3))
    else:  # fp32 (bf16 is 20-60x slower on AVX2 CPUs); a fixed, small KV pool per engine
        kw.update(dtype="float32", enforce_eager=True, kv_cache_memory_bytes=args.kv_cache_mib * 2**20)
    kw.update(json.loads(args.engine or "{}"))
    return kw


def provenance() -> dict:
    import torch
    import vllm

    from .. import __version__
    from ..checkpoint import training_commit

    sha, dirty = training_commit()  # (None, None) in a wheel install: no commit to report
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {
        "git_commit": (sha or "") + ("+dirty" if dirty else ""), "dflash_vllm": __version__, "vllm": vllm.__version__,
        "torch": torch.__version__, "python": platform.python_version(),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {dev}", "node": platform.node(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


ENGINE_OVERHEAD = 1 << 30  # an engine process of the demo pair on CPU, beside its KV pool: ~0.7-0.8 GiB RSS
BALLAST_MAX = 8 << 30


def auto_ballast_bytes(available: int, engines: int, kv_bytes: int) -> int:
    """The default ballast: a third of the available memory, at most ``BALLAST_MAX``, and never
    more than what the engines leave free (each its KV pool plus ``ENGINE_OVERHEAD``, and 2 GiB
    to spare), so that the bench never trades the bias for running out of memory."""
    room = available - engines * (kv_bytes + ENGINE_OVERHEAD) - (2 << 30)
    return max(0, min(BALLAST_MAX, available // 3, room))


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return 0


def hold_ballast(gib: float, engines: int = 1, kv_bytes: int = 0) -> bytearray | None:
    """Memory the bench process writes and holds before any engine starts (CPU), so that every
    engine's memory comes from what is left. Why: on the 2-core CPU VMs of sessions 48-49, engine
    processes of one configuration ran slower the earlier they started (four engines of no
    speculation, interleaved: 1.000, 1.050, 1.069, 1.071 in start order; with the start order
    reversed the first-started read 0.87 of the last), whichever name or rotation index they had.
    Per process, everything /proc shows was the same (threads, affinity, RSS, huge pages); an idle
    throwaway engine started first took part of it (1.000, 1.030, 1.030, 1.054), 8 GiB written
    and held first took it all (1.000, 1.023, 1.002, 1.012). So it follows the physical memory an
    engine gets: the pages the kernel hands out first (those freed most recently) run slower on
    these VMs, likely from how the host backs guest memory that was freed and reused. -1: the
    default size for ``engines`` engines with KV pools of ``kv_bytes`` (``auto_ballast_bytes``).
    None where there is nothing to hold."""
    if gib < 0:
        size = auto_ballast_bytes(_available_bytes(), engines, kv_bytes)
    else:
        size = int(gib * 2**30)
    if size < 4096:
        return None
    ballast = bytearray(size)  # zero pages, not yet backed: one write per page backs each
    ballast[::4096] = b"\1" * len(range(0, size, 4096))
    return ballast


def run(args) -> dict:  # args: a BenchConfig
    from transformers import AutoTokenizer

    from ..config import resolve_drafter_path

    if args.drafter and os.path.isdir(args.drafter):
        args.drafter = os.path.abspath(args.drafter)
    elif any(m in args.methods for m in ("ours", "native")):
        args.drafter = resolve_drafter_path(args.drafter)
    concs = [int(x) for x in args.concurrency.split(",")]
    sweep_sets = [s for s in args.prompt_sets.split(",") if s]
    grid_sets = [s for s in (args.grid_sets or "").split(",") if s and s not in sweep_sets]
    cells = [(ps, c) for ps in sweep_sets for c in concs] + [(ps, min(concs)) for ps in grid_sets]
    methods = method_configs(args)
    tok = AutoTokenizer.from_pretrained(args.target)
    eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
    prompts = {}
    for spec in dict.fromkeys([ps for ps, _ in cells]):
        n_max = max(args.requests or max(args.min_requests, 2 * c) for p, c in cells if p == spec)
        name, ids = prompt_set(spec, tok, n_max)
        prompts[spec] = (name, ids)
    kw = engine_kwargs(args, max(concs), len(methods))
    os.makedirs(args.log_dir, exist_ok=True)
    print(f"bench: {len(methods)} methods x {len(cells)} cells ({', '.join(methods)}); logs in {args.log_dir}", flush=True)
    workers: dict[str, Worker] = {}
    info: dict[str, dict] = {}
    ballast = (hold_ballast(args.ballast_gib, len(methods), kw["kv_cache_memory_bytes"])
               if "kv_cache_memory_bytes" in kw else None)  # CPU only
    ballast_bytes = len(ballast) if ballast is not None else 0
    try:
        for m, mc in methods.items():
            cfg = {"model": args.target, "engine": kw, "sync_timers": True, **mc}
            workers[m] = Worker(m, cfg, os.path.join(args.log_dir, f"{m}.log"))
            warm = [{"prompt_token_ids": ids, "max_tokens": 16, "stop_token_ids": eos, "ignore_eos": False}
                    for ids in prompts[cells[0][0]][1][:4]]
            workers[m].call({"cmd": "run", "requests": warm, "concurrency": 2})
            info[m] = {"speculative_config": mc["speculative_config"], "native": bool(mc.get("native")),
                       "startup_s": round(workers[m].hello["startup_s"], 2), "memory": workers[m].call({"cmd": "memory"})}
            spec = mc["speculative_config"] or {}
            info[m]["memory"]["drafter_weight_bytes"] = checkpoint_bytes(
                spec.get("model"), 4 if kw.get("dtype") == "float32" else 2)
            print(f"bench: {m} engine up in {info[m]['startup_s']:.1f} s", flush=True)
        raw: dict[tuple, list] = {}
        order = list(methods)
        for rep in range(args.repeats):
            for ci, (ps, c) in enumerate(cells):
                name, ids = prompts[ps]
                n = args.requests or max(args.min_requests, 2 * c)
                reqs = [{"prompt_token_ids": ids[i], "max_tokens": args.max_tokens, "ignore_eos": args.ignore_eos,
                         "stop_token_ids": [] if args.ignore_eos else eos,
                         "temperature": args.temperature, "seed": (1000 + i if args.temperature > 0 else None)}
                        for i in range(n)]
                # Each method first in turn, and every other repeat in the reverse order, so that no
                # method always runs right after the same other one (as the context sweep does).
                seq = order if rep % 2 == 0 else order[::-1]
                shift = (ci + rep) % len(seq)
                for m in seq[shift:] + seq[:shift]:
                    res = workers[m].call({"cmd": "run", "requests": reqs, "concurrency": c})
                    raw.setdefault((name, c, m), []).append(res)
                    tps = sum(s["new_tokens"] for s in res["steps"]) / res["wall_s"]
                    print(f"bench: [{rep + 1}/{args.repeats}] {name:>8} c={c:<3} {m:>7}: {tps:8.1f} tok/s", flush=True)
    finally:
        for w in workers.values():
            w.close()
        del ballast
    out_cells = []
    for (name, c, m), runs in raw.items():
        k = (methods[m]["speculative_config"] or {}).get("num_speculative_tokens")  # K_max: the histogram's width
        cell = {"prompt_set": name, "concurrency": c, "method": m, **report.summarize(runs, k)}
        if args.temperature == 0 and m != "none":
            base = raw[(name, c, "none")]
            same = sum(o["token_ids"] == b["token_ids"] for r, rb in zip(runs, base)
                       for o, b in zip(r["outputs"], rb["outputs"]))
            cell["identical_to_no_spec"] = round(same / sum(len(r["outputs"]) for r in runs), 4)
        out_cells.append(cell)
    report.add_ratios(out_cells)
    result = {
        "what": "dflash-vllm bench: closed-loop engine throughput/latency per method x concurrency x prompt set",
        "config": {"target": args.target, "drafter": args.drafter, "k": args.k, "methods": list(methods),
                   "concurrency": concs, "prompt_sets": sweep_sets, "grid_sets": grid_sets,
                   "max_tokens": args.max_tokens, "ignore_eos": args.ignore_eos, "temperature": args.temperature, "repeats": args.repeats,
                   "requests_per_cell": args.requests or f"max({args.min_requests}, 2 x concurrency)",
                   "engine": kw, "quick": args.quick, "options": dataclasses.asdict(args)},
        "provenance": provenance(),
        "methods": info,
        "ballast_bytes": ballast_bytes,
        "cells": out_cells,
    }
    result["adaptive_check"] = report.adaptive_check(result)  # [] without `ours` in the run
    aa = report.replica_control(result)  # with none#N in the run: the A/A control
    if aa:
        result["replica_control"] = aa
    return result
