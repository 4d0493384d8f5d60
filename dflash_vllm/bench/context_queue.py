"""The context queue's host work on K = 0 steps at batch 1 (no engine, no model): what a server
that serves one request at a time, drafting nothing, pays per step and at the queue's limit.

    dflash-vllm bench context-queue [--requests 400] [--prompt 40] [--generated 64] [--block-size 16]

Requests one after another, each a prompt step (``--prompt`` rows) and ``--generated`` one-row
steps, through the proposer's own deferral (``DFlashProposer._write_context``, writes stubbed
out) with prefix caching on (``--block-size``; 0: off) and the shipped limits (4,096 rows). At
batch 1 the queue holds one entry per step, so pruning and shedding at the limit walk ~4,000
entries. Printed: queue work per step, and per event at the limit the prune, the shed and the
write (the take, stubbed writes) in ms. Session 25, 2 cores, defaults, two alternated runs each:
prune 27.5 / 27.3 -> 2.5 / 3.0 ms, shed 42.4 / 45.0 -> 9.9 / 11.6 ms per event after ``_keep`` took
one-request entries whole (a step at batch 1 on the demo pair is ~3.5 ms).
"""

from __future__ import annotations

import argparse
import gc
import time
import types
from dataclasses import dataclass

from ..options import add_options, opt, parse_into


@dataclass
class QueueBenchConfig:
    requests: int = opt(400, help="requests, one after another")
    prompt: int = opt(40, help="prompt rows per request (one step)")
    generated: int = opt(64, help="one-row steps per request")
    block_size: int = opt(16, help="KV block size with prefix caching on; 0: prefix caching off")


def run(cfg: QueueBenchConfig) -> dict:
    import numpy as np
    import torch

    from ..proposers.dflash import ContextQueue, DFlashProposer, _Parts

    q = ContextQueue(block_size=cfg.block_size or None)
    q.ledger = bool(cfg.block_size)
    timers = {"prune": [0.0, 0], "shed": [0.0, 0], "take": [0.0, 0]}

    def timed(name, fn):
        def call(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                timers[name][0] += time.perf_counter() - t
                timers[name][1] += 1
        return call

    q.prune, q.shed, q.take = timed("prune", q.prune), timed("shed", q.shed), timed("take", q.take)
    proposer = object.__new__(DFlashProposer)  # only what _write_context touches
    proposer._ctx_queue, proposer._flush_s = q, 0.0
    proposer.model = types.SimpleNamespace(write_context_kv=lambda *a: None)
    ns, bs, next_block = types.SimpleNamespace, cfg.block_size, [0]

    def blocks(k: int) -> list[int]:
        next_block[0] += k
        return list(range(next_block[0] - k, next_block[0]))

    steps, busy = 0, 0.0
    gc.collect()
    gc.disable()  # a collection pass is the interpreter's, not the queue's
    try:
        for r in range(cfg.requests):
            rid = f"r{r}"
            for i, (n, s) in enumerate([(cfg.prompt, 0)] + [(1, cfg.prompt + j) for j in range(cfg.generated)]):
                q.end({f"r{r - 1}"} if r and not i else set())
                if bs and not i:
                    q.schedule([ns(req_id=rid, prompt_token_ids=[0] * n, block_ids=(blocks(-(-n // bs)),),
                                   num_computed_tokens=0)], None)
                elif bs and s % bs == 0:
                    q.schedule([], ns(req_ids=[rid], resumed_req_ids=set(), new_block_ids=[(blocks(1),)],
                                      num_computed_tokens=[s]))
                features = _Parts(torch.zeros(n, 256) for _ in range(4))
                pos = torch.arange(s, s + n)
                t = time.perf_counter()
                DFlashProposer._write_context(proposer, features, pos, pos.clone(), n, defer=True,
                                              owners=([rid], np.array([n]), np.array([s])))
                busy += time.perf_counter() - t
                steps += 1
    finally:
        gc.enable()
    out = {"steps": steps, "queue_ms_per_step": round(1e3 * busy / steps, 4)}
    for name, (sec, calls) in timers.items():
        out[name] = {"events": calls, "ms_per_event": round(1e3 * sec / max(calls, 1), 2)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dflash-vllm bench context-queue", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(ap, QueueBenchConfig)
    cfg = parse_into(QueueBenchConfig, ap.parse_args(argv))
    out = run(cfg)
    print(f"{out['steps']} steps at batch 1, K = 0: queue work {out['queue_ms_per_step']} ms per step")
    for name in ("prune", "shed", "take"):
        print(f"  {name}: {out[name]['events']} events, {out[name]['ms_per_event']} ms each")
    return 0
