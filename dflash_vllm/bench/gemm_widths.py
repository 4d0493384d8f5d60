"""Reproduction for fixes/cpu_gemm_widths.py: the time vLLM's CPU oneDNN linears spend on new
row counts under speculation, with each step's rows as they come and padded to a few dozen widths.

    dflash-vllm bench gemm-widths [--layers 4] [--steps 40] [--passes 2] [--json OUT]

A small Qwen3 target's linears (hidden 256: qkv, o, gate_up, down per layer, ``--layers``
layers) through ``vllm._custom_ops.onednn_mm`` with handlers made as vLLM makes them (32
primitives each), oneDNN's process-wide cache at the add-on's capacity (64). A verify step's
rows are a batch of R requests with R + sum of their drafts: per request a draft count drawn
from 0..15 (adaptive drafting's spread), ``--steps`` steps at each R in 1, 2, 4, 8, 16, the
whole sequence ``--passes`` times (same widths again: what a warm server meets). Each mode runs
in its own process. Printed per pass: ms per step and the distinct row counts the layers saw.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass

from .. import envs
from ..options import add_options, opt, parse_into

BATCHES = (1, 2, 4, 8, 16)
SHAPES = [(768, 256), (256, 256), (1536, 256), (256, 768)]  # (out, in) of one layer: qkv, o, gate_up, down


def widths(steps: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [r + sum(rng.randint(0, 15) for _ in range(r)) for r in BATCHES for _ in range(steps)]


def child(mode: str, layers: int, steps: int, passes: int) -> list[dict]:
    import torch
    import vllm._custom_ops as ops

    from ..fixes.cpu_gemm_widths import bucket, padded

    torch.set_num_threads(1)
    torch.manual_seed(0)
    linears = []
    for _ in range(layers):
        for n, k in SHAPES:
            handler = ops.create_onednn_mm(torch.randn(n, k).t(), 32)  # as vLLM makes it, and its cpu_linear:
            fn = lambda x, weight, bias, h=handler: ops.onednn_mm(h, x, bias)  # noqa: E731
            linears.append((padded(fn) if mode == "padded" else fn, k))
    seq = widths(steps)
    xs = {}
    out = []
    for p in range(passes):
        seen, t0 = set(), time.perf_counter()
        for m in seq:
            seen.add(bucket(m) if mode == "padded" else m)
            for fn, k in linears:
                x = xs.get((m, k))
                if x is None:
                    x = xs[(m, k)] = torch.randn(m, k)
                fn(x, None, None)
        out.append({"pass": p, "ms_per_step": round(1e3 * (time.perf_counter() - t0) / len(seq), 3),
                    "distinct_rows": len(seen)})
    return out


def run(mode: str, layers: int, steps: int, passes: int) -> list[dict]:
    from ..fixes.cpu_onednn_cache import CAPACITY

    env = {**os.environ, envs.ONEDNN_CACHE.name: str(CAPACITY)}
    cmd = [sys.executable, "-m", __name__, "--child", mode, str(layers), str(steps), str(passes)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


@dataclass
class GemmWidthsRepro:
    layers: int = opt(4, "target layers (4 linears each, hidden 256)")
    steps: int = opt(40, "verify steps at each batch size 1, 2, 4, 8, 16")
    passes: int = opt(2, "passes over the same sequence of widths")
    json: str | None = opt(None, "also write the result here")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:  # one mode, in its own process (run() starts it)
        print(json.dumps(child(argv[1], *map(int, argv[2:5]))))
        return 0
    ap = argparse.ArgumentParser(prog="dflash-vllm bench gemm-widths", description=__doc__.splitlines()[0])
    add_options(ap, GemmWidthsRepro)
    a = parse_into(GemmWidthsRepro, ap.parse_args(argv))
    result = {}
    for mode in ("exact", "padded"):
        result[mode] = run(mode, a.layers, a.steps, a.passes)
        print(f"{mode:7s} " + " | ".join(f"pass {r['pass']}: {r['ms_per_step']:.2f} ms/step, {r['distinct_rows']} widths"
                                       for r in result[mode]), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"layers": a.layers, "steps": a.steps, "passes": a.passes, "runs": result}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
