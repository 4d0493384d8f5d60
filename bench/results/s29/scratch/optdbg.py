"""Scratch (session 29): the optimum's parts at batch >= 48 (tasks@64): N0, prefill, plain price, the chosen drafts, the priced drafted step, vs the steps measured."""
import os, sys, json
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
import numpy as np
from dflash_vllm import adaptive as A
from dflash_vllm.bench import profile as P
rec = []
orig = A.AdaptivePolicy._optimum
def _optimum(self, dec_ids, num_reqs):
    opt = orig(self, dec_ids, num_reqs)
    if opt is not None and len(dec_ids) >= 48 and opt.k is not None:
        cm = self.cost
        n0 = num_reqs + self.prefill_tokens
        d = int(opt.k.sum()); rows = int(np.count_nonzero(opt.k))
        s = self.acceptance.survival(dec_ids)
        gain = len(dec_ids) + sum(float(s[i, :k].sum()) for i, k in enumerate(opt.k))
        tv = float(cm.t_verify(n0, d)); td = float(cm.t_draft(rows * (opt.cap + 1)))
        rec.append(dict(r=len(dec_ids), n0=round(n0, 1), t0=round(1e3 * float(cm.t_verify(n0)), 2), d=d, rows=rows, cap=opt.cap,
                        gain=round(gain, 1), tv=round(1e3 * tv, 2), td=round(1e3 * td, 2), ratio=round(opt.g / opt.g0, 2),
                        plain64=round(1e3 * float(cm.t_verify(len(dec_ids))), 2)))
    return opt
A.AdaptivePolicy._optimum = _optimum
if __name__ == "__main__":
    P.trace_policy(sys.argv[1:], 1, int(os.environ.get("REQ", "128")))
    for r in rec[-25:]:
        print(r)
