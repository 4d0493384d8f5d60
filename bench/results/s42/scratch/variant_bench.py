"""Session 42 (issue #10): `dflash-vllm bench run` with engines whose proposer code differs
(bisect_worker.py does it in each engine process), next to none and none#2:

  bisect : ours@k=0 (shipped) and three cut-down K = 0 engines, ours@k=0#2 = stub, #3 = noplan,
           #4 = noqueue (see bisect_worker.py);
  ab M   : method M on this checkout and M#2 on the checkout in S42_CODE (e.g. a `git worktree`
           of the commit before): old against new in one run.

    python bench/results/s42/scratch/variant_bench.py bisect --prompt-sets chat,free \\
        --concurrency 1,2,4,8,16,32,64 --repeats 4 --min-requests 32 --out bench/results/s42/k0-bisect.json
    S42_CODE=/tmp/s42old python bench/results/s42/scratch/variant_bench.py ab ours@adaptive [same options]
"""
import json
import os
import subprocess
import sys

from dflash_vllm.bench import runner

HERE = os.path.dirname(os.path.abspath(__file__))
_configs = runner.method_configs
if sys.argv[1] == "bisect":
    ENVS, ARGS = {"ours@k=0#2": {"S42_VARIANT": "stub"}, "ours@k=0#3": {"S42_VARIANT": "noplan"},
                  "ours@k=0#4": {"S42_VARIANT": "noqueue"}}, sys.argv[2:]
    METHODS = "none,none#2,ours@k=0," + ",".join(ENVS)
else:  # ab METHOD
    ENVS, ARGS = {sys.argv[2] + "#2": {"S42_CODE": os.environ.get("S42_CODE", "")}}, sys.argv[3:]
    METHODS = (f"none,none#2,{sys.argv[2]}#2,{sys.argv[2]}" if os.environ.get("S48_OLD_FIRST")  # start order swapped
               else f"none,none#2,{sys.argv[2]},{sys.argv[2]}#2")


def method_configs(args):
    table = _configs(args)
    for m, env in ENVS.items():
        if m in table:
            table[m] = {**table[m], "env": env}
    return table


def worker_init(self, name, cfg, log_path):
    self.name, self.log_path = name, log_path
    self.log = open(log_path, "w")
    self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "bisect_worker.py"), json.dumps(cfg)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
    self.hello = self._read()


runner.method_configs = method_configs
runner.Worker.__init__ = worker_init

if __name__ == "__main__":
    from dflash_vllm.bench import main

    sys.exit(main(["run", "--methods", METHODS, "--grid-sets", "", *ARGS]))
