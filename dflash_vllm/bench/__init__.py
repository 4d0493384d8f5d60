"""``dflash-vllm bench``: where DFlash stands, and where the time goes.

    dflash-vllm bench [run] [--quick] [options]   # run the sweep, write JSON + PNGs, print the tables
    dflash-vllm bench table RESULT.json            # the paper-shaped tables of a result
    dflash-vllm bench compare A.json B.json        # B relative to A, cell by cell
    dflash-vllm bench plot RESULT.json             # (re)draw the PNGs

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

from ..paths import DEMO_DRAFTER, DEMO_TARGET, results_dir
from .report import compare, load, plots, tables

QUICK = dict(methods="none,ours,native,ngram", concurrency="1,8", prompt_sets="tasks", grid_sets="",
             min_requests=8, max_tokens=96)


def _run_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dflash-vllm bench run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=DEMO_TARGET)
    ap.add_argument("--drafter", default=DEMO_DRAFTER, help="DFlash drafter (dir or HF repo id)")
    ap.add_argument("--k", type=int, default=15, help="DFlash drafts per step (num_speculative_tokens)")
    ap.add_argument("--draft-sample-method", default=None, help="e.g. probabilistic (for --temperature > 0)")
    ap.add_argument("--methods", default="none,ours,ours@adaptive,ours@k=1,3,7,native,ngram",
                    help="ours = K drafts per step (--k); ours@adaptive = adaptive drafting (K up to --k); "
                         "ours@k=N pins K=N (ours@k=1,3,7,15: several)")
    ap.add_argument("--ngram-k", type=int, default=4)
    ap.add_argument("--eagle3", default=None, help="an EAGLE-3 drafter to add as a method")
    ap.add_argument("--eagle3-k", type=int, default=3)
    ap.add_argument("--concurrency", default="1,2,4,8,16,32,64")
    ap.add_argument("--prompt-sets", default="tasks,code,chat,free", help="swept over concurrency; NAME=PATH for a file")
    ap.add_argument("--grid-sets", default="arith,sort,convert,record",
                    help="extra sets at the lowest concurrency only (Table 1 columns)")
    ap.add_argument("--requests", type=int, default=0, help="requests per cell (default max(--min-requests, 2 x conc))")
    ap.add_argument("--min-requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--ignore-eos", action="store_true",
                    help="every request generates exactly --max-tokens (decode-dominated; default: stop at EOS)")
    ap.add_argument("--repeats", type=int, default=1, help="passes over all cells (pooled)")
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--kv-cache-mib", type=int, default=512, help="CPU: KV pool per engine")
    ap.add_argument("--engine", default=None, help="JSON of extra vLLM engine arguments for every method")
    ap.add_argument("--quick", action="store_true",
                    help="a few minutes: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    ap.add_argument("--out", default=None, help="result JSON (default bench/results/bench[-quick].json)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--log-dir", default=None, help="engine logs (default: next to --out)")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    sub = argv[0] if argv and not argv[0].startswith("-") else "run"
    if argv and argv[0] == sub:
        argv = argv[1:]
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
    ap = _run_parser()
    args = ap.parse_args(argv)
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
