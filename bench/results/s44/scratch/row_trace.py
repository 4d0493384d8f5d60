"""Session 44 (issue #10), grown from session 42's cell_trace.py (same engine set-up): where the adaptive policy's drafted steps leave rows undrafted, cell
by cell through the full check's rotation (one in-process adaptive engine, the bench's
requests: max(48, 6c) per cell, 160 tokens at most). Per cell: tok/s, steps, drafted steps, and
over the drafted steps' decoding rows: the share that submitted 0 drafts, and of those the share
closed at the door / incomplete (ContextQueue.incomplete: they can never draft); mean k of the
drafting rows and mean q.

    python bench/results/s44/scratch/row_trace.py [REPEATS] [SETS] [CONCURRENCIES]
"""
import os
import sys
import time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


DETAIL = os.environ.get("DETAIL", "") == "1"
DETAIL_SETS = ("tasks",)


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    sets = (sys.argv[2] if len(sys.argv) > 2 else "tasks,code,chat,free").split(",")
    concs = [int(c) for c in (sys.argv[3] if len(sys.argv) > 3 else "1,2,4,8,16,32,64").split(",")]
    import numpy as np
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set
    envs.set(envs.FIXED_K, "adaptive")
    llm = P._engine(P._spec(), max(concs))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    eos = [tok.eos_token_id]
    prompts = {s: prompt_set(s, tok, max(48, 6 * max(concs)))[1] for s in sets}
    engine = llm.llm_engine
    drive(engine, [{"prompt_token_ids": p, "max_tokens": 16, "stop_token_ids": eos, "ignore_eos": False}
                   for p in prompts[sets[0]][:4]], concurrency=2, id_prefix="warm-")
    d = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.drafter
    pol, queue = d.policy, d._ctx_queue
    rec = []
    orig_plan = pol.plan

    def plan(req_ids, is_decode, *a, **k):
        kk, q = orig_plan(req_ids, is_decode, *a, **k)
        dec = np.asarray(is_decode, dtype=bool)
        inc = queue.incomplete
        closed = sum(1 for r in req_ids if r in inc)
        rec.append((len(req_ids), int(dec.sum()), int((kk > 0).sum()), q, closed, int(kk.sum())))
        if DETAIL:
            o = pol.optimum
            detail.append(f"    plan {len(rec) - cell_start[0]:3d} R={len(req_ids):3d} dec={int(dec.sum()):3d} "
                          f"drafting={int((kk > 0).sum()):3d} q={q:2d} closed={closed:3d} dormant={int(pol.dormant)} "
                          + (f"g/g0={o.g / max(o.g0, 1e-9):.3f} cap={o.cap}" if o is not None else ""))
        return kk, q
    orig_close = d._close_door

    def close_door(new_reqs):
        before = queue.closed_requests
        orig_close(new_reqs)
        o = pol.optimum
        shut = queue.closed_requests - before
        if shut and o is not None:
            doors.append((o.g / max(o.g0, 1e-9), shut))
        if DETAIL:
            detail.append(f"    door: {len(new_reqs)} new, {shut} closed (plan {len(rec) - cell_start[0] + 1})")
    d._close_door = close_door
    detail, cell_start, doors = [], [0], []
    pol.plan = plan
    for rep in range(reps):
        for s in sets:
            for c in concs:
                n = max(48, 6 * c)
                reqs = [{"prompt_token_ids": prompts[s][i % len(prompts[s])], "max_tokens": 160, "stop_token_ids": eos,
                         "ignore_eos": False} for i in range(n)]
                r0 = len(rec)
                cell_start[0] = r0
                detail.clear()
                doors.clear()
                t = time.perf_counter()
                res = drive(engine, reqs, concurrency=c, id_prefix=f"{s}{c}r{rep}-")
                wall = time.perf_counter() - t
                toks = sum(x["new_tokens"] for x in res["steps"])
                cell = np.array(rec[r0:], dtype=np.float64).reshape(-1, 6)
                dr = cell[cell[:, 3] > 0]
                rows = dr[:, 0].sum() if len(dr) else 0
                # decode rows of drafted steps without drafts (rows that may draft = dec)
                zero = (dr[:, 0] - dr[:, 2]).sum() if len(dr) else 0
                closed = dr[:, 4].sum() if len(dr) else 0
                mk = dr[:, 5].sum() / max(dr[:, 2].sum(), 1) if len(dr) else 0
                allk = cell[:, 5].sum() / max(cell[:, 0].sum(), 1) if len(cell) else 0
                print(f"[{rep + 1}] {s:5} c={c:<3} {toks / wall:7.0f} tok/s steps {len(res['steps']):4d} plans {len(cell):4d} "
                      f"drafted {len(dr):4d} | in drafted: rows {rows:5.0f} zero {zero / max(rows, 1):5.2f} "
                      f"closed/incomplete {closed / max(rows, 1):5.2f} | k of drafting rows {mk:5.2f} "
                      f"q {dr[:, 3].mean() if len(dr) else 0:5.2f} | meanK all plans {allk:5.2f}", flush=True)
                if doors:
                    gg = np.array([g for g, _ in doors])
                    w = np.array([x for _, x in doors])
                    print(f"      closed {w.sum()} requests at the door; the optimum's best drafting g/g0 then: "
                          f"<0.8 {w[gg < 0.8].sum()}, 0.8-0.9 {w[(gg >= 0.8) & (gg < 0.9)].sum()}, "
                          f"0.9-1.0 {w[(gg >= 0.9) & (gg < 1.0)].sum()}, >=1.0 {w[gg >= 1.0].sum()} "
                          f"(min {gg.min():.2f} max {gg.max():.2f})", flush=True)
                if DETAIL and s in DETAIL_SETS and c >= 16:
                    print("\n".join(detail[:60]), flush=True)


if __name__ == "__main__":
    main()
