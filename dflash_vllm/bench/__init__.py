"""``dflash-vllm bench``: where DFlash stands, and where the time goes.

    dflash-vllm bench [run] [--quick] [options]   # run the sweep, write JSON + PNGs, print the tables
    dflash-vllm bench table RESULT.json            # the paper-shaped tables of a result
    dflash-vllm bench compare A.json B.json        # B relative to A, cell by cell
    dflash-vllm bench plot RESULT.json             # (re)draw the PNGs
    dflash-vllm bench TOOL [options]               # the narrower measurements below, each with --help
      context-sweep   draft ms per step vs context length, ours vs native, same random weights (#12)
      profile         where a drafting call's or an engine step's time goes (torch.profiler, cProfile)
      ablations       small-scale training ablations on the demo target (paper Tables 7, 9, 13)
      sampling-tau    tau at temperature 0 and 1, probabilistic vs greedy drafts
      onednn-cache    the reproduction behind fixes/cpu_onednn_cache.py (RSS vs distinct batch sizes)
      gemm-widths     the reproduction behind fixes/cpu_gemm_widths.py (oneDNN linears at new row counts)
      context-queue   the context queue's host work on K = 0 steps at batch 1, per step and at its limit

Defaults: the shipped demo pair; methods none, ours (K = --k), ours@adaptive (adaptive drafting), ours@k=1,3,7,15 (K
pinned), native (vLLM's own DFlash on the same weights), ngram (+ eagle3 with --eagle3 PATH);
concurrency 1..64; prompt sets tasks, code, chat, free swept over concurrency, plus one column
per task family at concurrency 1 (Table 1 style).
See bench/README.md for what every number means.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass

from ..options import add_options, opt, parse_into
from ..paths import DEMO_DRAFTER, DEMO_TARGET, results_dir
from .report import compare, load, plots, tables

QUICK = dict(methods="none,ours,native,ngram", concurrency="1,8", prompt_sets="tasks", grid_sets="",
             min_requests=8, max_tokens=96)


@dataclass
class BenchConfig:
    """One `dflash-vllm bench run`; every field is an option, and the result records all of them."""

    target: str = opt(DEMO_TARGET, "target model directory")
    drafter: str = opt(DEMO_DRAFTER, "DFlash drafter (dir or HF repo id)")
    k: int = opt(15, "DFlash drafts per step (num_speculative_tokens)")
    draft_sample_method: str | None = opt(None, "e.g. probabilistic (for --temperature > 0)")
    methods: str = opt("none,ours,ours@adaptive,ours@k=1,3,7,native,ngram",
                       "ours = K drafts per step (--k); ours@adaptive = adaptive drafting (K up to --k); "
                       "ours@k=N pins K=N (ours@k=1,3,7,15: several); METHOD#N, N >= 2: METHOD again in "
                       "another engine process (how far two processes of one method read apart)")
    ngram_k: int = opt(4, "drafts per step of the ngram method")
    eagle3: str | None = opt(None, "an EAGLE-3 drafter to add as a method")
    eagle3_k: int = opt(3, "drafts per step of the eagle3 method")
    concurrency: str = opt("1,2,4,8,16,32,64", "closed-loop concurrencies swept")
    prompt_sets: str = opt("tasks,code,chat,free", "swept over concurrency; NAME=PATH for a file")
    grid_sets: str = opt("arith,sort,convert,record", "extra sets at the lowest concurrency only (Table 1 columns)")
    requests: int = opt(0, "requests per cell (default max(--min-requests, 2 x conc))")
    min_requests: int = opt(16, "fewest requests per cell")
    max_tokens: int = opt(160, "tokens per request at most")
    temperature: float = opt(0.0, "sampling temperature (0: greedy, outputs compared with none)")
    ignore_eos: bool = opt(False, "every request generates exactly --max-tokens (decode-dominated; default: stop at EOS)")
    repeats: int = opt(1, "passes over all cells (pooled)")
    max_model_len: int = opt(1024, "vLLM max_model_len")
    kv_cache_mib: int = opt(512, "CPU: KV pool per engine")
    ballast_gib: float = opt(-1.0, "CPU: GiB of memory the bench holds, written, while its engines start and run "
                                   "(-1: a third of the available memory, at most 8, within what the engines leave; 0: none): engines started "
                                   "first ran up to 13 percent slow without it (bench/README.md, session 49)")
    engine: str | None = opt(None, "JSON of extra vLLM engine arguments for every method")
    quick: bool = opt(False, "a few minutes: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    out: str | None = opt(None, "result JSON (default bench/results/bench[-quick].json)")
    no_plots: bool = opt(False, "skip the PNGs")
    log_dir: str | None = opt(None, "engine logs (default: next to --out)")


def _run_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dflash-vllm bench run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(ap, BenchConfig)
    return ap


TOOLS = {"context-sweep": "context_sweep", "profile": "profile", "ablations": "ablations",
         "sampling-tau": "sampling_tau", "onednn-cache": "onednn_cache", "gemm-widths": "gemm_widths",
         "context-queue": "context_queue"}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    sub = argv[0] if argv and not argv[0].startswith("-") else "run"
    if argv and argv[0] == sub:
        argv = argv[1:]
    if sub in TOOLS:
        import importlib

        return int(importlib.import_module(f"{__name__}.{TOOLS[sub]}").main(argv) or 0)
    if sub in ("table", "plot", "compare"):
        need = 2 if sub == "compare" else 1
        if len(argv) != need or any(a.startswith("-") for a in argv):
            print(__doc__, file=sys.stderr)
            return 2
        if sub == "compare":
            print(compare(load(argv[0]), load(argv[1])))
        elif sub == "table":
            print(tables(load(argv[0])))
        else:
            for f in plots(load(argv[0]), argv[0].removesuffix(".json")):
                print(f)
        return 0
    if sub != "run":
        print(__doc__, file=sys.stderr)
        return 2
    args = parse_into(BenchConfig, _run_parser().parse_args(argv))
    if args.quick:  # quick values replace the defaults, not what the user typed
        typed = {a.split("=")[0].lstrip("-").replace("-", "_") for a in argv if a.startswith("--")}
        for k, v in QUICK.items():
            if k not in typed:
                setattr(args, k, v)
    args.out = args.out or os.path.join(results_dir(), "bench-quick.json" if args.quick else "bench.json")
    args.log_dir = args.log_dir or args.out.removesuffix(".json") + "-logs"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    from .runner import run

    result = run(args)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\nbench: wrote {args.out}")
    if not args.no_plots:
        for p in plots(result, args.out.removesuffix(".json")):
            print(f"bench: wrote {p}")
    print()
    print(tables(result))
    return 0
