"""Scratch (session 29): the cost model's price of each step against the step it then measures (adaptive, one engine)."""
import os, sys, json
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
import numpy as np
from dflash_vllm import adaptive as A
from dflash_vllm.bench import profile as P
rec = []
ov, od = A.CostModel.observe_step, A.CostModel.observe_draft
def observe_step(self, s, n, drafts=0, transient=False):
    if self.ready:
        rec.append(("v", n, drafts, s, float(self.t_verify(n - drafts, drafts)), transient))
    return ov(self, s, n, drafts=drafts, transient=transient)
def observe_draft(self, s, bt):
    if self.ready:
        rec.append(("d", bt, 0, s, float(self.t_draft(bt)), False))
    return od(self, s, bt)
A.CostModel.observe_step, A.CostModel.observe_draft = observe_step, observe_draft
if __name__ == "__main__":
    P.trace_policy(sys.argv[1:], 1, int(os.environ.get("REQ", "256")))
    json.dump(rec, open("/tmp/s29/costerr.json", "w"))
    # summary for the last set's steady part: steps with all 64 decoding
    for kind in ("v", "d"):
        rows = [r for r in rec[-400:] if r[0] == kind and not r[5]]
        for lo, hi in ((0, 1), (1, 100), (100, 400), (400, 2000)):
            sel = [r for r in rows if lo <= (r[2] if kind == "v" else r[1]) < hi and (kind == "d" or r[1] - r[2] >= 60)]
            if sel:
                m = np.array([r[3] for r in sel]) * 1e3; p = np.array([r[4] for r in sel]) * 1e3
                print(f"{kind} {'drafts' if kind=='v' else 'block tok'} [{lo},{hi}): n={len(sel)} measured {m.mean():.2f} ms, priced {p.mean():.2f} ms")
