"""Reproduction for fixes/cpu_onednn_cache.py: RSS and time of vLLM's CPU oneDNN linears
against the number of distinct batch sizes, at oneDNN's default primitive-cache capacity and at
the add-on's default (64).

    dflash-vllm bench onednn-cache [--layers 24] [--m-step 3] [--passes 3] [--json OUT]

Each capacity runs in its own process (oneDNN reads ONEDNN_PRIMITIVE_CACHE_CAPACITY once):
``--layers`` linears of 4 shapes (a small Qwen3 layer's qkv / o / gate_up / down, hidden 256)
through ``vllm._custom_ops.onednn_mm``, the path vLLM's CPU build uses for them, each fed
every batch size M in 1..1024 (step ``--m-step``) in a shuffled order, ``--passes`` times.
Printed per pass: RSS growth since the start (MiB) and seconds. Last run (2 cores, 24 layers,
342 sizes, 3 passes): default 664 / 782 / 883 MiB (still climbing) in 125 s, 64: 182 / 170 /
170 MiB in 126 s. A server meets the same thing as prefill chunks, decode batches and (under
speculation) verify and drafter widths vary.
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

SHAPES = [(768, 256), (256, 256), (1536, 256), (256, 768)]  # (out, in)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(layers: int, m_step: int, passes: int) -> list[dict]:
    import torch
    import vllm._custom_ops as ops

    torch.set_num_threads(1)
    shapes = [SHAPES[i % len(SHAPES)] for i in range(layers)]
    handlers = [ops.create_onednn_mm(torch.randn(n, k).t(), 32) for n, k in shapes]  # as vLLM does
    sizes = list(range(1, 1025, m_step))
    rng = random.Random(0)
    start, t0, out = _rss_mib(), time.perf_counter(), []
    for p in range(passes):
        rng.shuffle(sizes)
        for m in sizes:
            for h, (_, k) in zip(handlers, shapes):
                ops.onednn_mm(h, torch.randn(m, k), None)
        out.append({"pass": p, "rss_growth_mib": round(_rss_mib() - start, 1),
                    "seconds": round(time.perf_counter() - t0, 1)})
    return out


def run(capacity: str | None, layers: int, m_step: int, passes: int) -> list[dict]:
    env = dict(os.environ)
    env.pop(envs.ONEDNN_CACHE.name, None)
    if capacity is not None:
        env[envs.ONEDNN_CACHE.name] = capacity
    cmd = [sys.executable, "-m", __name__, "--child", str(layers), str(m_step), str(passes)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


@dataclass
class OnednnRepro:
    layers: int = opt(24, "linears, cycling through 4 shapes of a small Qwen3 layer")
    m_step: int = opt(3, "batch sizes 1..1024 in this step")
    passes: int = opt(3, "passes over all batch sizes (shuffled)")
    json: str | None = opt(None, "also write the result here")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:  # one capacity, in its own process (run() starts it)
        print(json.dumps(child(*map(int, argv[1:4]))))
        return 0
    ap = argparse.ArgumentParser(prog="dflash-vllm bench onednn-cache", description=__doc__.splitlines()[0])
    add_options(ap, OnednnRepro)
    a = parse_into(OnednnRepro, ap.parse_args(argv))
    from ..fixes.cpu_onednn_cache import CAPACITY

    result = {}
    for label, cap in (("onednn default (1024)", None), (f"dflash-vllm default ({CAPACITY})", str(CAPACITY))):
        result[label] = run(cap, a.layers, a.m_step, a.passes)
        print(label, " | ".join(f"pass {r['pass']}: +{r['rss_growth_mib']:.0f} MiB, {r['seconds']:.0f} s"
                                for r in result[label]), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"layers": a.layers, "m_step": a.m_step, "passes": a.passes, "runs": result}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
