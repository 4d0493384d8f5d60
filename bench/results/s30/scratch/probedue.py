"""Scratch (session 30): per step across free@64 -> tasks@1, why a probe is or is not due
(level bucket vs the last probe's, steps since drafting, the spacing's loss: modelled vs measured,
T_d at the probe's block)."""
import os, sys
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
import numpy as np
from dflash_vllm.bench import profile as P
from dflash_vllm import adaptive as A

LOG = []
if __name__ == "__main__":
    orig_plan = A.AdaptivePolicy.plan
    def plan(self, req_ids, is_decode, *a, **kw):
        surprised = self.acceptance.surprised
        k, q = orig_plan(self, req_ids, is_decode, *a, **kw)
        c = self._optimum_cache
        opt = c.opt if c else None
        nr = len(req_ids)
        b = A.CostModel._bucket(nr)
        m = self.probe_loss.get(b)
        td = float(self.cost.t_draft(16)) if self.cost.draft.n else None
        LOG.append((self.step, nr, int(is_decode.sum()), q, self._level_bucket(nr), self._probe_bucket, self.steps_since_draft,
                    None if opt is None else round(opt.probe_loss, 2), None if m is None else round(m, 2),
                    None if opt is None else opt.q_probe, None if td is None else round(td * 1e3, 2),
                    round(float(self.cost.t_verify(nr)) * 1e3, 2), self.dormant, "S" if surprised else ""))
        return k, q
    A.AdaptivePolicy.plan = plan
    orig_dt = A.AdaptivePolicy.on_draft_time
    def on_draft_time(self, seconds, block_tokens):
        LOG.append(("TD", self.step, round(seconds * 1e3, 2), block_tokens))
        return orig_dt(self, seconds, block_tokens)
    A.AdaptivePolicy.on_draft_time = on_draft_time
    sets = sys.argv[1:]
    try:
        P.trace_policy(sets, 1, int(os.environ.get("REQ", "48")))
    finally:
        print("step nr dec q lvl pbkt since optloss measloss qprobe Td16 Tplain dormant surprised")
        for row in LOG:
            print(*row)
