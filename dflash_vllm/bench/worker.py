"""One benchmark method = one long-lived engine process, driven over a pipe.

The driver (`dflash_vllm.bench.runner`) starts one worker per method and keeps them all alive,
so cells can be interleaved across methods (machine noise hits all alike) while each engine is
started and warmed once. The engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)
so that the step timers (`driver.install_step_timers`) see the model runner.

Protocol: one JSON object per line on stdin (a command), one per line on the private result
channel (the original stdout; the library's prints are sent to stderr). Commands:
  {"cmd": "run", "requests": [...], "concurrency": c}  -> a closed-loop run (`driver.drive`)
  {"cmd": "memory"}                                     -> drafter weights and KV bytes
  {"cmd": "quit"}
"""

from __future__ import annotations

import json
import os
import sys
import time

from .. import envs


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


class GcClock:
    """Time the interpreter spends in garbage collection (``gc.callbacks``), per generation: a
    full collection of an engine process holds the step it lands in for milliseconds, and a
    method that allocates more Python objects per step triggers more of them."""

    def __init__(self):
        import gc

        self.seconds, self.counts, self._t = 0.0, [0, 0, 0], None
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        elif self._t is not None:
            self.seconds += time.perf_counter() - self._t
            self.counts[info["generation"]] += 1
            self._t = None

    def read(self) -> tuple[float, list[int]]:
        return self.seconds, list(self.counts)


def main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)  # results only; everything else goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    cfg = json.loads(sys.argv[1])
    os.environ.update(cfg.get("env", {}))  # a method's flags, e.g. envs.CPU_ATTN off for an A/B of our attention
    envs.set(envs.NATIVE, 1 if cfg.get("native") else 0)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM

    from .. import metrics
    from ..driver import drive, install_step_timers

    timers = install_step_timers(sync=cfg.get("sync_timers", False))
    kwargs = dict(cfg["engine"])
    if cfg.get("speculative_config"):
        kwargs["speculative_config"] = cfg["speculative_config"]
        kwargs["per_request_spec_decode_metrics"] = "detailed"
    t0 = time.perf_counter()
    llm = LLM(model=cfg["model"], **kwargs)
    proto.write(json.dumps({"ready": True, "startup_s": time.perf_counter() - t0}) + "\n")
    gc_clock = GcClock()
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "quit":
            break
        try:
            if cmd["cmd"] == "run":
                before = metrics.read_draft_lengths()
                gc_before = gc_clock.read()
                res = drive(llm.llm_engine, cmd["requests"], concurrency=cmd["concurrency"], timers=timers)
                after = metrics.read_draft_lengths()
                gc_after = gc_clock.read()
                res["gc"] = {"s": gc_after[0] - gc_before[0],
                             "collections": [a - b for a, b in zip(gc_after[1], gc_before[1])]}
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
