"""Session 36: the block forward from the anchors alone (forward_block) against the full block
(forward(ids, positions, block_len)), same inputs, same call, alternating order, in the engine.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python bench/results/s36/scratch/ab_block.py 1,4,16,64 [old|new]

With old or new, only that forward runs (and is timed) in this process: run the two
alternately, one process each, so that neither sees the other's GEMM shapes (oneDNN's
per-layer primitive caches).

Drives the demo pair (K = 15 fixed) with held-out task prompts at each concurrency; every
drafting call runs both forwards on its own inputs (the one returned alternates) and the wall
time of each is summed per batch size n. Prints ms per call, new/old, and the max abs difference."""
import collections
import sys
import time

import torch


def main():
    concs = [int(c) for c in sys.argv[1].split(",")]
    from dflash_vllm.bench import profile as P
    from dflash_vllm.models.drafter import DFlashDrafterModel

    real = DFlashDrafterModel.forward_block
    acc = collections.defaultdict(lambda: [0.0, 0.0, 0, 0.0])
    calls = [0]

    only = sys.argv[2] if len(sys.argv) > 2 else None

    def both(self, anchors, positions, block_len):
        n = anchors.shape[0]
        if only:
            t = time.perf_counter()
            if only == "new":
                out = real(self, anchors, positions, block_len)
            else:
                ids = torch.full((n, block_len), self.cfg.mask_token_id, dtype=torch.int64)
                ids[:, 0] = anchors
                out = self(ids.view(-1), positions, block_len=block_len)
            a = acc[(CUR[0], n)]
            a[0] += time.perf_counter() - t
            a[1] += 1e-9
            a[2] += 1
            return out
        ids = torch.full((n, block_len), self.cfg.mask_token_id, dtype=torch.int64)
        ids[:, 0] = anchors
        calls[0] += 1
        order = ("new", "old") if calls[0] % 2 else ("old", "new")
        out = {}
        for which in order:
            t = time.perf_counter()
            out[which] = real(self, anchors, positions, block_len) if which == "new" else self(ids.view(-1), positions, block_len=block_len)
            dt = time.perf_counter() - t
            a = acc[(CUR[0], n)]
            a[0 if which == "new" else 1] += dt
        a[2] += 1
        a[3] = max(a[3], (out["new"] - out["old"]).abs().max().item())
        return out["new"]

    DFlashDrafterModel.forward_block = both
    from vllm import LLM
    from transformers import AutoTokenizer
    from dflash_vllm import paths
    from dflash_vllm.driver import drive
    from dflash_vllm.training.tasks import make_samples
    from dflash_vllm.prompts import chat_ids

    llm = P._engine(P._spec(dflash_adaptive=False), 64)
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    for c in concs:
        CUR[0] = c
        reqs = [{"prompt_token_ids": chat_ids(tok, s.prompt), "max_tokens": 96, "ignore_eos": False,
                 "stop_token_ids": [tok.eos_token_id]} for s in make_samples(max(60, 8 * c), seed=9)]
        drive(llm.llm_engine, reqs, concurrency=c)
    print("conc  calls  new_ms  old_ms  new/old  max|diff|  (calls at the cell's full batch n = c)")
    for c in concs:
        rows = [(n, a) for (cc, n), a in acc.items() if cc == c]
        tn = sum(a[0] for _, a in rows); to = sum(a[1] for _, a in rows); k = sum(a[2] for _, a in rows)
        full = [a for n, a in rows if n == c]
        fl = f" | n={c}: {full[0][2]} calls, {1e3*full[0][0]/full[0][2]:.2f} vs {1e3*full[0][1]/full[0][2]:.2f} ms, {full[0][0]/full[0][1]:.3f}" if full else ""
        print(f"{c:4d} {k:6d} {1e3*tn/k:7.2f} {1e3*to/k:7.2f} {tn/to:8.3f} {max(a[3] for _, a in rows):.2e}{fl}")


CUR = [0]
if __name__ == "__main__":
    main()
