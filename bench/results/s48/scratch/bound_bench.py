"""Session 48 (issue #10): how much of the weak cells' gap to no speculation is the dormant
step's context queue. `dflash-vllm bench run` with none, none#2, adaptive as shipped, adaptive
whose dormant steps queue nothing (#2), K = 0 pinned, and the hook stubbed (K = 0 #2); see
bound_worker.py.

    python bench/results/s48/scratch/bound_bench.py --prompt-sets chat,free --concurrency 1,2,4,8,16 \\
        --repeats 4 --min-requests 32 --out bench/results/s48/bound.json
"""
import json
import os
import subprocess
import sys

from dflash_vllm.bench import runner

HERE = os.path.dirname(os.path.abspath(__file__))
_configs = runner.method_configs
ENVS = {"ours@adaptive#2": {"S48_VARIANT": "noqueue"}, "ours@k=0#2": {"S48_VARIANT": "stub"}}
METHODS = "none,none#2,ours@adaptive,ours@adaptive#2,ours@k=0,ours@k=0#2"


def method_configs(args):
    table = _configs(args)
    for m, env in ENVS.items():
        if m in table:
            table[m] = {**table[m], "env": env}
    return table


def worker_init(self, name, cfg, log_path):
    self.name, self.log_path = name, log_path
    self.log = open(log_path, "w")
    self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "bound_worker.py"), json.dumps(cfg)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
    self.hello = self._read()


runner.method_configs = method_configs
runner.Worker.__init__ = worker_init

if __name__ == "__main__":
    from dflash_vllm.bench import main

    sys.exit(main(["run", "--methods", METHODS, "--grid-sets", "", *sys.argv[1:]]))
