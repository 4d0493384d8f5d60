"""Session 43 (issues #10, #12): `dflash-vllm bench run` with some engines started under
OMP_NUM_THREADS=1 (vLLM 0.32's CPU worker binds its OpenMP threads to every core and then skips
its own "reduce torch to 1 thread for serving"; its comment says idle OMP workers spin and slow
the step's serial host code). Methods: none and ours@adaptive as usual (2 threads on this
machine), none#2 and ours@adaptive#2 with OMP_NUM_THREADS=1, all in one rotation.

    python bench/results/s43/scratch/omp_bench.py --prompt-sets tasks,code,chat --concurrency 1,2,4,8 \\
        --repeats 4 --min-requests 32 --out bench/results/s43/omp1.json
"""
import os
import subprocess
import sys

from dflash_vllm.bench import runner

ONE = {"none#2", "ours@adaptive#2"}
_init = runner.Worker.__init__


def worker_init(self, name, cfg, log_path):
    if name not in ONE:
        return _init(self, name, cfg, log_path)
    old = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by this worker's process only (restored below)
    try:
        return _init(self, name, cfg, log_path)
    finally:
        if old is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = old


runner.Worker.__init__ = worker_init

if __name__ == "__main__":
    from dflash_vllm.bench import main

    sys.exit(main(["run", "--methods", "none,none#2,ours@adaptive,ours@adaptive#2", "--grid-sets", "", *sys.argv[1:]]))
