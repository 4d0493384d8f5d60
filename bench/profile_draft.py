"""Where one drafting step's time goes, ours vs vLLM's native DFlash (CPU, batch 1, demo pair).

    .venv/bin/python bench/profile_draft.py 0   # ours
    .venv/bin/python bench/profile_draft.py 1   # native (DFLASH_VLLM_NATIVE=1)

Runs 60 held-out prompts one at a time, profiles `propose_draft_token_ids` calls 20..220 with
torch.profiler and prints the mean wall time of a draft step and the ops' self time per step
(only ops inside the drafting calls are counted). Single runs vary by ~10% on a 2-core VM.
"""
import os
import sys

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"]="0"
os.environ["DFLASH_VLLM_NATIVE"]=sys.argv[1]
if __name__ == "__main__":
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    llm = LLM(model="deploy/demo/target", speculative_config={"method":"dflash","model":"deploy/demo/drafter","num_speculative_tokens":15}, dtype="float32", enforce_eager=True, kv_cache_memory_bytes=2**27, skip_tokenizer_init=True, max_num_seqs=8)
    orig = GPUModelRunner.propose_draft_token_ids
    state = {"n":0}
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    def wrapped(self,*a,**k):
        state["n"]+=1
        if state["n"]==20: prof.start()
        with torch.profiler.record_function("PROPOSE"):
            r = orig(self,*a,**k)
        if state["n"]==220: prof.stop()
        return r
    GPUModelRunner.propose_draft_token_ids = wrapped
    from transformers import AutoTokenizer
    from dflash_vllm.bench.prompts import chat_ids
    from dflash_vllm.training.tasks import make_samples
    tok = AutoTokenizer.from_pretrained("deploy/demo/target")
    ps=[TokensPrompt(prompt_token_ids=chat_ids(tok, s.prompt)) for s in make_samples(60, seed=9)]
    for p in ps:
        llm.generate([p], SamplingParams(max_tokens=96, temperature=0, stop_token_ids=[tok.eos_token_id]), use_tqdm=False)
    evs = prof.events()
    spans = [(e.time_range.start, e.time_range.end) for e in evs if e.name == "PROPOSE"]
    import bisect, collections
    starts = [a for a,b in spans]
    agg = collections.Counter(); cnt = collections.Counter()
    for e in evs:
        if e.name == "PROPOSE": continue
        i = bisect.bisect_right(starts, e.time_range.start) - 1
        if i >= 0 and e.time_range.end <= spans[i][1]:
            agg[e.name] += e.self_cpu_time_total; cnt[e.name] += 1
    tot = sum(b-a for a,b in spans)
    print("propose spans", len(spans), "mean us", tot/len(spans), "self-sum us/step", sum(agg.values())/len(spans))
    for n, v in agg.most_common(22):
        print(f"{n[:60]:60s} {v/len(spans):8.1f} us/step {cnt[n]/len(spans):6.1f} calls/step")
