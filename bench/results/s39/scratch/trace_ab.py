"""Trace (session 39, issue #10): the adaptive policy's plans in the session's A/B cells, in the
bench's order (tasks c = 1, tasks c = 64, free c = 1, free c = 64; PASSES times), on one
in-process engine of the demo pair warmed as the bench warms it; per cell: mean submitted K,
probes, measured probe losses, drafting calls, and the plan per step (# drafted, P probe, . plain).

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python bench/results/s39/scratch/trace_ab.py [PASSES]
    CELLS=code@64,chat@1,tasks@64,free@1 ... (session 40: other cells, SET@CONCURRENCY, in order)
"""
import json
import os
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


CELLS = [(w, int(c)) for w, c in (x.split("@") for x in
         os.environ.get("CELLS", "tasks@1,tasks@64,free@1,free@64").split(","))]


def main():
    passes = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    from transformers import AutoTokenizer

    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set

    envs.set(envs.FIXED_K, "adaptive")
    llm = P._engine(P._spec(), 64)
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    sets = {s: prompt_set(s, tok, 128)[1] for s in sorted({w for w, _ in CELLS})}
    eos = [tok.eos_token_id]

    def reqs(n, max_tokens=160, which="tasks"):
        return [{"prompt_token_ids": p, "max_tokens": max_tokens, "ignore_eos": False, "stop_token_ids": eos}
                for p in sets[which][:n]]

    engine = llm.llm_engine
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    d = runner.drafter
    pol = d.policy
    log, drafts = [], []
    orig_plan, orig_dt = pol.plan, pol.on_draft_time

    def plan(req_ids, is_decode, *a, **kw):
        k, q = orig_plan(req_ids, is_decode, *a, **kw)
        log.append((len(req_ids), int(k.sum()), int(q), pol._probes, bool(pol.dormant)))
        return k, q

    def on_draft_time(seconds, block_tokens, num_reqs):
        drafts.append((round(seconds * 1e3, 2), block_tokens, num_reqs))
        return orig_dt(seconds, block_tokens, num_reqs)

    pol.plan, pol.on_draft_time = plan, on_draft_time
    drive(engine, reqs(4, 16), concurrency=2, id_prefix="warm-")
    for p in range(passes):
        for which, c in CELLS:
            m0, d0, pr0 = len(log), len(drafts), pol._probes
            t = time.perf_counter()
            out = drive(engine, reqs(max(16, 2 * c), which=which), concurrency=c, id_prefix=f"p{p}{which}c{c}-")
            wall = time.perf_counter() - t
            toks = sum(s["new_tokens"] for s in out["steps"])
            part = log[m0:]
            dec = [x for x in part]
            mk = sum(x[1] for x in dec) / max(1, sum(x[0] for x in dec))
            dd = drafts[d0:]
            print(f"pass {p} {which} c={c:2d}: {toks / wall:7.1f} tok/s, {len(out['steps'])} steps, plans {len(part)}, "
                  f"mean K/req {mk:.2f}, dormant plans {sum(x[4] for x in part)}, probes {pol._probes - pr0}, "
                  f"probe_loss {{{', '.join(f'{b}: {v:.2f}' for b, v in sorted(pol.probe_loss.items()))}}}", flush=True)
            if dd:
                print("    draft calls (ms, block tokens, reqs): " + " ".join(f"{a}/{b}/{c_}" for a, b, c_ in dd[:12])
                      + (" ..." if len(dd) > 12 else ""))
            print("    plan q: " + "".join("." if x[2] == 0 else ("P" if x[4] else "#") for x in part)[:300])


if __name__ == "__main__":
    main()
