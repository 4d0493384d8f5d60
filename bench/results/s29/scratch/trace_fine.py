"""Scratch (session 29): the policy's plan per step across a change of workload (code@64 then chat@1), window 2."""
import os, sys
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
from dflash_vllm.bench import profile as P
if __name__ == "__main__":
    orig = P.PolicyTrace.__init__
    P.PolicyTrace.__init__ = lambda self, window=40: orig(self, int(os.environ.get("WIN", "2")))
    P.trace_policy(sys.argv[1:], 1, int(os.environ.get("REQ", "16")))
