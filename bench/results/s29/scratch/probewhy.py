"""Scratch (session 29): why each drafted step of a weak run drafted (optimum, surprise, probe spacing, batch-4x rule)."""
import os, sys, collections
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
from dflash_vllm import adaptive as A
from dflash_vllm.bench import profile as P
log = []
orig_choose = A.AdaptivePolicy._choose
def _choose(self, dec_ids, num_reqs):
    surprised = self.acceptance.surprised
    pb = self._probe_bucket
    k, q = orig_choose(self, dec_ids, num_reqs)
    c = self._optimum_cache
    if q:
        if c is not None and c.drafts:
            why = "optimum"
        elif surprised:
            why = "surprise"
        elif pb is not None and abs(A.CostModel._bucket(num_reqs) - pb) >= 2:
            why = "batch4x"
        else:
            why = "spacing"
        log.append((self.step, num_reqs, why))
    return k, q
A.AdaptivePolicy._choose = _choose
if __name__ == "__main__":
    P.trace_policy(sys.argv[1:], 1, int(os.environ.get("REQ", "16")))
    print("WHY", collections.Counter(w for _, _, w in log))
    for s, n, w in log[-60:]:
        print("STEP", s, n, w)
