import random, sys, json
from dflash_vllm.tiny import make_tiny_target, make_tiny_drafter, make_trained_tiny_drafter
from dflash_vllm.harness import run_job_subprocess
import os
root = "/tmp/s29/tiny"
if not os.path.exists(root + "/drafter_trained"):
    make_tiny_target(root + "/target"); make_tiny_drafter(root + "/drafter", root + "/target")
    make_trained_tiny_drafter(root + "/target", root + "/drafter_trained", steps=300)
r = random.Random(7)
load = [{"prompt_token_ids": [r.randrange(3, 510) for _ in range(260 + 7 * i)], "max_tokens": 24,
         "temperature": 1.0, "seed": 1000 + i} for i in range(12)]
CHUNKED = {"max_num_batched_tokens": 128, "enable_chunked_prefill": True, "max_num_seqs": 12, "max_model_len": 1024}
WHOLE = {**CHUNKED, "max_num_batched_tokens": 1024}
mode = sys.argv[1]
spec = {"method": "dflash", "model": root + "/drafter_trained", "num_speculative_tokens": 3, "draft_sample_method": "probabilistic"}
if mode != "default":
    spec["dflash_adaptive"] = mode == "adaptive"
job = {"model": root + "/target", "speculative_config": spec, "requests": load}
env = {"DFLASH_VLLM_ADAPTIVE_STATS": "1"}
a = run_job_subprocess({**job, "engine": CHUNKED}, env=env)
b = run_job_subprocess({**job, "engine": WHOLE}, env=env)
for i, (x, y) in enumerate(zip(a["outputs"], b["outputs"])):
    print(i, x["token_ids"] == y["token_ids"], x["accepted_per_step"][:6], y["accepted_per_step"][:6])
print({k: v for k, v in a.items() if k != "outputs"} if isinstance(a, dict) else "")
