"""Run a simulation script with AdaptivePolicy's keyword defaults changed (POL_<name>=value in the
environment; session 40).

    POL_probe_budget=0.01 python bench/results/s40/scratch/withpol.py bench/results/s37/scratch/sim_rising.py 20
"""
import os, sys, runpy
import dflash_vllm.adaptive as ad
f = ad.AdaptivePolicy.__init__
d = list(f.__defaults__); names = f.__code__.co_varnames[1:f.__code__.co_argcount][-len(d):]
for k, v in os.environ.items():
    if k.startswith("POL_"):
        d[names.index(k[4:])] = type(d[names.index(k[4:])])(float(v))
f.__defaults__ = tuple(d)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
