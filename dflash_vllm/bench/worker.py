"""One benchmark method = one long-lived engine process, driven over a pipe.

The driver (`dflash_vllm.bench.runner`) starts one worker per method and keeps them all alive,
so cells can be interleaved across methods (machine noise hits all alike) while each engine is
started and warmed once. The engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)
so that the step timers below see the model runner.

Protocol: one JSON object per line on stdin (a command), one per line on the private result
channel (the original stdout; the library's prints are sent to stderr). Commands:
  {"cmd": "run", "requests": [...], "concurrency": c}  -> a closed-loop run, see `closed_loop`
  {"cmd": "memory"}                                     -> drafter weights and KV bytes
  {"cmd": "quit"}
"""

from __future__ import annotations

import json
import os
import sys
import time


def closed_loop(engine, requests: list[dict], concurrency: int, timers: dict | None) -> dict:
    """Keep `concurrency` requests in flight until all are done (a new one joins as soon as one
    finishes). Times are wall-clock around `engine.step()`, the way a streaming client sees
    them, minus HTTP: TTFT = first output after the request was added; ITL = gap between
    successive outputs of a request (a speculative step can deliver several tokens at once,
    as a streamed chunk does)."""
    from vllm.inputs import TokensPrompt

    from ..harness import sampling_params

    todo = list(range(len(requests)))
    todo.reverse()
    inflight: set[int] = set()
    added, first, last, n_out = {}, {}, {}, {}
    itl: list[float] = []
    out: dict[int, dict] = {}
    steps: list[dict] = []
    t_begin = time.perf_counter()
    while len(out) < len(requests):
        while todo and len(inflight) < concurrency:
            i = todo.pop()
            r = requests[i]
            engine.add_request(str(i), TokensPrompt(prompt_token_ids=r["prompt_token_ids"]), sampling_params(r))
            inflight.add(i)
            added[i], n_out[i] = time.perf_counter(), 0
        running = len(inflight)
        if timers is not None:
            timers.clear()
        t0 = time.perf_counter()
        outs = engine.step()
        t1 = time.perf_counter()
        new_tokens = 0
        for o in outs:
            i = int(o.request_id)
            c = o.outputs[0]
            k = len(c.token_ids) - n_out[i]
            if k > 0:
                if i not in first:
                    first[i] = t1
                else:
                    itl.append(t1 - last[i])
                last[i], n_out[i] = t1, len(c.token_ids)
                new_tokens += k
            if o.finished:
                m = getattr(c, "spec_decode_metrics", None)
                inflight.discard(i)
                out[i] = {
                    "token_ids": list(c.token_ids),
                    "ttft_s": first.get(i, t1) - added[i],
                    "e2e_s": t1 - added[i],
                    "accepted_per_step": list(m.per_step_accepted) if m is not None else [],
                }
        step = {"seconds": t1 - t0, "running": running, "new_tokens": new_tokens}
        if timers:
            step.update(timers)
        steps.append(step)
    return {"wall_s": time.perf_counter() - t_begin, "outputs": [out[i] for i in range(len(requests))],
            "steps": steps, "itl_s": itl}


def memory_report(llm) -> dict:
    """KV-cache bytes held by drafter layers and by target layers (drafter weights are counted
    from the checkpoint by the driver: on CPU vLLM repacks linear weights out of the parameters)."""

    def probe(worker):
        runner = worker.model_runner
        ctx = runner.vllm_config.compilation_config.static_forward_context
        drafter = getattr(runner, "drafter", None)
        model = getattr(drafter, "model", None)
        drafter_names: set[str] = set()
        if model is not None:
            drafter_names = {m.layer_name for m in model.modules() if hasattr(m, "layer_name") and m.layer_name in ctx}
        kv = {name: layer.kv_cache.numel() * layer.kv_cache.element_size() for name, layer in ctx.items()
              if getattr(layer, "kv_cache", None) is not None and hasattr(layer.kv_cache, "numel")}
        cache = runner.vllm_config.cache_config
        return {
            "drafter_kv_bytes": int(sum(v for k, v in kv.items() if k in drafter_names)),
            "target_kv_bytes": int(sum(v for k, v in kv.items() if k not in drafter_names)),
            "drafter_layers": len(drafter_names),
            "kv_blocks": cache.num_gpu_blocks,
            "kv_block_size": cache.block_size,
        }

    return llm.collective_rpc(probe)[0]


def main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)  # results only; everything else goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    cfg = json.loads(sys.argv[1])
    os.environ.update(cfg.get("env", {}))  # e.g. DFLASH_VLLM_CPU_ATTN=0 for an A/B of our attention
    os.environ["DFLASH_VLLM_NATIVE"] = "1" if cfg.get("native") else "0"
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM

    from .. import metrics
    from ..harness import _install_step_timers

    timers = _install_step_timers(sync=cfg.get("sync_timers", False))
    kwargs = dict(cfg["engine"])
    if cfg.get("speculative_config"):
        kwargs["speculative_config"] = cfg["speculative_config"]
        kwargs["per_request_spec_decode_metrics"] = "detailed"
    t0 = time.perf_counter()
    llm = LLM(model=cfg["model"], **kwargs)
    proto.write(json.dumps({"ready": True, "startup_s": time.perf_counter() - t0}) + "\n")
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "quit":
            break
        try:
            if cmd["cmd"] == "run":
                before = metrics.read_draft_lengths()
                res = closed_loop(llm.llm_engine, cmd["requests"], cmd["concurrency"], timers)
                after = metrics.read_draft_lengths()
                if after:  # drafts submitted per request per step (0 included), this run only
                    before = before + [0.0] * (len(after) - len(before))
                    res["submitted_hist"] = [int(a - b) for a, b in zip(after, before)]
            elif cmd["cmd"] == "memory":
                res = memory_report(llm)
            else:
                raise ValueError(f"unknown command {cmd['cmd']!r}")
        except Exception as e:  # report, keep the engine for the next cell
            import traceback

            traceback.print_exc()
            res = {"error": f"{type(e).__name__}: {e}"}
        proto.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
