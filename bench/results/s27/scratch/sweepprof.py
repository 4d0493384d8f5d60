import os, sys, collections, bisect
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
import torch
def main(ctx, native):
    from dflash_vllm import envs
    envs.set(envs.NATIVE, 1 if native else 0)
    from dflash_vllm.bench.context_sweep import make_pair, cell_requests
    from dflash_vllm.driver import drive
    from vllm import LLM
    target, drafter = make_pair("/tmp/dflash-context-sweep")
    max_len = 8192 + 24 + 15 + 64
    llm = LLM(model=target, speculative_config={"method": "dflash", "model": drafter, "num_speculative_tokens": 15},
              dtype="float32", enforce_eager=True, seed=0, max_model_len=max_len, max_num_seqs=8, max_num_batched_tokens=8192,
              skip_tokenizer_init=True, disable_log_stats=True, kv_cache_memory_bytes=int(1.5 * 8 * max_len * 6 * 2 * 2 * 64 * 4))
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    orig = GPUModelRunner.propose_draft_token_ids
    on = [False]
    def propose(self, *a, **k):
        if not on[0]: return orig(self, *a, **k)
        with torch.profiler.record_function("PROPOSE"):
            return orig(self, *a, **k)
    GPUModelRunner.propose_draft_token_ids = propose
    drive(llm.llm_engine, cell_requests(ctx, 1, 8, seed=1), concurrency=1)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    on[0] = True
    prof.start()
    for s in range(3):
        drive(llm.llm_engine, cell_requests(ctx, 1, 24, seed=ctx + s), concurrency=1, id_prefix=f"p{s}-")
    prof.stop()
    events = prof.events()
    spans = sorted((e.time_range.start, e.time_range.end) for e in events if e.name == "PROPOSE")
    starts = [a for a, _ in spans]
    self_us, count = collections.Counter(), collections.Counter()
    for e in events:
        if e.name == "PROPOSE": continue
        i = bisect.bisect_right(starts, e.time_range.start) - 1
        if i >= 0 and e.time_range.end <= spans[i][1]:
            self_us[e.name] += e.self_cpu_time_total; count[e.name] += 1
    n = len(spans)
    print(f"RESULT ctx={ctx} native={native}: {n} calls, {sum(b - a for a, b in spans) / n:.1f} us per call, ops {sum(self_us.values()) / n:.1f}")
    for name, us in self_us.most_common(14):
        print(f"   {name[:55]:55s} {us / n:8.1f} us {count[name] / n:6.1f}")
if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2] == "native")
