"""Session 41 (issue #10): is the K = 0 floor our hook or vLLM's speculative paths? `dflash-vllm bench
run` with one extra method, `ours@k=0#2` turned into "K = 0 with the drafting hook stubbed out"
(stub_worker.py: no plan, no queued context, nothing), next to none, none#2 and ours@k=0. With
S41_CODE=DIR, ours@k=0#2 runs the code of the checkout DIR instead (old against new).

    python bench/results/s41/scratch/stub_bench.py [bench run options, e.g. --prompt-sets chat,free
        --concurrency 1,8,64 --repeats 4 --out bench/results/s41/k0-stub.json]
"""
import os
import subprocess
import sys

from dflash_vllm.bench import runner

HERE = os.path.dirname(os.path.abspath(__file__))
_configs = runner.method_configs


def method_configs(args):
    table = _configs(args)
    if "ours@k=0#2" in table:  # S41_CODE=DIR: that checkout's code instead of the stub
        env = {"S41_CODE": os.environ["S41_CODE"]} if os.environ.get("S41_CODE") else {"S41_STUB": "1"}
        table["ours@k=0#2"] = {**table["ours@k=0#2"], "env": env}
    return table


_init = runner.Worker.__init__


def worker_init(self, name, cfg, log_path):
    self.name, self.log_path = name, log_path
    self.log = open(log_path, "w")
    self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "stub_worker.py"), __import__("json").dumps(cfg)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
    self.hello = self._read()


runner.method_configs = method_configs
runner.Worker.__init__ = worker_init

if __name__ == "__main__":
    from dflash_vllm.bench import main

    sys.exit(main(["run", "--methods", "none,none#2,ours@k=0,ours@k=0#2", "--grid-sets", "", *sys.argv[1:]]))
