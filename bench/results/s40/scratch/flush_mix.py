"""Session 40 (issue #10). What a probe's flush writes (adaptive, in-process engine): per flush, the queued
rows of requests closed at the door (their prompt's full blocks, kept for prefix caching) against the
others', and the write's time.

    python bench/results/s40/scratch/flush_mix.py CONCURRENCY [chat]
"""
import os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
def main():
    c = int(sys.argv[1]); which = sys.argv[2] if len(sys.argv) > 2 else "chat"
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    envs.set(envs.FIXED_K, "adaptive")
    llm = P._engine(P._spec(), max(8, c))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    _, ids = prompt_set(which, tok, 4 * max(32, 2 * c))
    reqs = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False, "stop_token_ids": [tok.eos_token_id]} for p in ids]
    n = len(reqs) // 4
    engine = llm.llm_engine
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    d = runner.drafter; q = d._ctx_queue
    closed = set()
    cd = q.close_door
    def close_door(rids):
        before = set(q.incomplete); r = cd(rids); closed.update(set(q.incomplete) - before); return r
    q.close_door = close_door
    stats = []
    take = q.take
    def tk():
        es = [e for e in q.entries]
        rows_closed = rows_other = 0
        for e in es:
            _, f, pos, sl, rids, counts, starts, sel = e
            live = None
            cnt = counts
            for r, k in zip(rids, list(cnt)):
                if r in closed: rows_closed += int(k)
                else: rows_other += int(k)
        t = time.perf_counter(); out = take(); 
        stats.append([rows_closed, rows_other, out[0].shape[0] if out else 0, t])
        return out
    q.take = tk
    w = d.model.write_context_kv
    def wr(*a):
        t = time.perf_counter(); r = w(*a); dt = time.perf_counter() - t
        if stats and stats[-1][3] is not None and len(stats[-1]) == 4: stats[-1].append(dt)
        return r
    d.model.write_context_kv = wr
    drive(engine, reqs[:n], concurrency=c, id_prefix="warm-")
    stats.clear()
    t0 = time.perf_counter()
    steps = len(drive(engine, reqs[n:], concurrency=c, id_prefix="s-")["steps"])
    wall = time.perf_counter() - t0
    tot_w = sum(s[4] for s in stats if len(s) > 4)
    print(f"c={c} {which}: {steps} steps, {1e3*wall/steps:.2f} ms/step; flushes {len(stats)}; rows closed/other per flush: "
          + ", ".join(f"{s[0]}/{s[1]}" + (f" ({1e3*s[4]:.1f} ms)" if len(s) > 4 else "") for s in stats)
          + f"; writes {1e3*tot_w:.0f} ms = {100*tot_w/wall:.1f} % of the wall time; closed at the door {len(closed)}")
main()
