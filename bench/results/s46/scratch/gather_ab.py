"""Session 46 (issue #10): ContextQueue.take's gathering, the code before 7c69de6 (``git show
2c31ae7:dflash_vllm/proposers/dflash.py`` saved as OLD) against this checkout's, alternated in one
process on the same synthetic queue: ENTRIES queued steps of ROWS rows as per-layer parts (4 layers
of 576 features, the demo target's aux layers), LIVE of each step's rows still live (the rest of
requests that ended), as at chat c = 8 with the door closed (~210 entries, 4 of 8 rows live).

    python bench/results/s46/scratch/gather_ab.py OLD [ENTRIES] [ROWS] [LIVE] [ROUNDS]
"""
import importlib.util
import statistics
import sys
import time

import numpy as np
import torch

from dflash_vllm.proposers import dflash as new


def load(path):
    spec = importlib.util.spec_from_file_location("dflash_vllm.proposers._dflash_old", path)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "dflash_vllm.proposers"  # its relative imports: this checkout's package
    spec.loader.exec_module(mod)
    return mod


def main():
    old = load(sys.argv[1])
    n_e, rows, live, rounds = (int(x) for x in (sys.argv[2:] + ["210", "8", "4", "30"][len(sys.argv) - 2:])[:4])
    torch.set_num_threads(2)

    def entries(mod):
        torch.manual_seed(0)  # the same values for both codes (each its own _Parts class)
        out = []
        for i in range(n_e):
            feats = mod._Parts(torch.randn(rows, 576) for _ in range(4))
            pos, slots = torch.arange(i * rows, (i + 1) * rows), torch.arange(i * rows, (i + 1) * rows)
            sel = None if live == rows else np.arange(live, dtype=np.int64)
            out.append((i, feats, pos, slots, ["r"], np.array([rows]), None, sel))
        return out

    def take_old(es):
        return old._gather_features(es), old._gather(es, 2), old._gather(es, 3)

    def take_new(es):
        index = new._live_index(es)
        if index is not None:
            index = torch.from_numpy(index)
        return new._gather_features(es, index), new._gather(es, 2, index), new._gather(es, 3, index)

    es_old, es_new = entries(old), entries(new)
    a, b = take_old(es_old), take_new(es_new)
    assert all(torch.equal(x, y) for x, y in zip(a, b)), "the same rows, in the same order"
    times = {"old": [], "new": []}
    for r in range(rounds):
        for name, f, es in (("old", take_old, es_old), ("new", take_new, es_new))[:: 1 if r % 2 else -1]:
            t = time.perf_counter()
            f(es)
            times[name].append(time.perf_counter() - t)
    mo, mn = statistics.median(times["old"]), statistics.median(times["new"])
    print(f"{n_e} entries x {rows} rows, {live} live: old {1e3 * mo:.2f} ms, new {1e3 * mn:.2f} ms (medians of "
          f"{rounds}, alternated), new / old {mn / mo:.2f}")


if __name__ == "__main__":
    main()
