"""The adaptive policy's measured probe losses in the engine (session 37, issue #10): one
in-process engine of the demo pair, the weak cells (chat then free at each concurrency, 2C
requests per cell, ROUNDS times); every probe measurement (``_measure_probe``) is logged: the
sample ``(p1 + p2) / P - 2 - accepted / r``, and the estimate the policy keeps for its bucket.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python bench/results/s37/scratch/probe_loss.py [ROUNDS] [C,C,...] [OUT.json]
"""
import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    concs = [int(c) for c in (sys.argv[2] if len(sys.argv) > 2 else "1,4,16,64").split(",")]
    out = sys.argv[3] if len(sys.argv) > 3 else None
    from transformers import AutoTokenizer

    from dflash_vllm import adaptive, envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.driver import drive
    from dflash_vllm.prompts import prompt_set

    log = []
    orig = adaptive.AdaptivePolicy._measure_probe

    def measure(self, period, num_reqs):
        m = self._probe_meas
        before = dict(self.probe_loss)
        orig(self, period, num_reqs)
        if m is not None and self._probe_meas is None:  # a measurement ended here
            b = adaptive.CostModel._bucket(m.batch)
            e = self._plain_period.get(b)
            acc = self.acceptance
            accepted = acc.last_accepted if acc.verified_steps == m.verified + 1 else 0
            sample = None
            if m.first is not None and e is not None and e[1] >= 4 and e[0] > 0:
                sample = (m.first + period) / e[0] - 2.0 - accepted / max(m.batch, 1)
            log.append({"cell": cell[0], "step": self.step, "batch": m.batch, "bucket": b, "sample": sample,
                        "accepted": accepted, "plain_ms": None if e is None else 1e3 * e[0],
                        "before": before.get(b), "after": self.probe_loss.get(b)})

    adaptive.AdaptivePolicy._measure_probe = measure
    envs.set(envs.FIXED_K, "adaptive")
    cmax = max(concs)
    llm = P._engine(P._spec(), max(8, cmax))
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    engine = llm.llm_engine
    cell = ["warm"]
    sets = {}
    for ps in ("chat", "free"):
        _, ids = prompt_set(ps, tok, 2 * cmax * (rounds + 1))
        sets[ps] = [{"prompt_token_ids": p, "max_tokens": 64, "ignore_eos": False,
                     "stop_token_ids": [tok.eos_token_id]} for p in ids]
    drive(engine, sets["chat"][:32], concurrency=4, id_prefix="warm-")
    used = {"chat": 32, "free": 0}
    for r in range(rounds):
        for ps in ("chat", "free"):
            for c in concs:
                cell[0] = f"{ps}@{c}"
                n = max(32, 2 * c)
                drive(engine, sets[ps][used[ps]:used[ps] + n], concurrency=c, id_prefix=f"{r}{ps}{c}-")
                used[ps] += n
    for x in log:
        print(json.dumps(x))
    if out:
        json.dump(log, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
