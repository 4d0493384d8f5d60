"""Scratch (session 28): the drafter's context write and block forward at new vs seen row counts (oneDNN primitive per M)."""
import os, sys, time, json
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
import torch
from dflash_vllm.bench import profile as P
if __name__ == "__main__":
    llm = P._engine(P._spec(), 8)
    runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    model = runner.drafter.model
    width = model.fc.input_size
    res = {}
    with torch.inference_mode():
        def w(m):
            f = torch.randn(m, width); pos = torch.arange(m); slots = torch.full((m,), -1, dtype=torch.long)
            t = time.perf_counter(); model.write_context_kv(f, pos, slots); return 1e3 * (time.perf_counter() - t)
        for m in (64, 64, 64): w(m)
        res["seen M=64"] = [round(w(64), 3) for _ in range(5)]
        res["new M 65..74"] = [round(w(m), 3) for m in range(65, 75)]
        res["same again 65..74"] = [round(w(m), 3) for m in range(65, 75)]
        res["new M 200..209"] = [round(w(m), 3) for m in range(200, 210)]
        res["seen M=208"] = [round(w(208), 3) for _ in range(5)]
        res["M 100..140 (41 shapes), then 100 again"] = [round(sum(w(m) for m in range(100, 141)), 3), round(w(100), 3)]
    print(json.dumps(res, indent=0))
