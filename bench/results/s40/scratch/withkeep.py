"""Run a simulation script with AcceptanceModel's shift_keep / shift_min / shift_gap defaults changed
(SHIFT_KEEP=0.1 etc. in the environment; session 40).

    SHIFT_KEEP=0.1 python bench/results/s40/scratch/withkeep.py SCRIPT.py ARGS
"""
import os, sys, runpy
import dflash_vllm.adaptive as ad
d = list(ad.AcceptanceModel.__init__.__defaults__)
names = ad.AcceptanceModel.__init__.__code__.co_varnames[2:2 + len(d)]
for k in ("shift_keep", "shift_min", "shift_gap"):
    if k.upper() in os.environ:
        d[names.index(k)] = float(os.environ[k.upper()])
ad.AcceptanceModel.__init__.__defaults__ = tuple(d)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
