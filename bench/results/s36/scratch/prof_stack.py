"""Session 36: where ours' small ops in a drafting call come from (torch.profiler with stacks).

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python bench/results/s36/scratch/prof_stack.py [--native] [CONC]

Runs `dflash-vllm bench profile draft` with with_stack=True and prints, for the ops named in
OPS, their self time per drafting call grouped by the 6 innermost Python frames."""
import functools
import sys

import torch

OPS = ("aten::fill_", "aten::cat", "aten::mul", "aten::copy_", "aten::max", "aten::mm", "aten::silu", "aten::zero_")

if __name__ == "__main__":
    native = "--native" in sys.argv
    conc = int([a for a in sys.argv[1:] if a.isdigit()][0]) if any(a.isdigit() for a in sys.argv[1:]) else 64
    holder = {}
    real = torch.profiler.profile

    def profile(*a, **k):
        holder["p"] = real(*a, with_stack=True, **k)
        return holder["p"]

    torch.profiler.profile = profile
    from dflash_vllm.bench import profile as prof_mod

    prof_mod.profile_draft(native, conc)
    p = holder["p"]
    for e in p.key_averages(group_by_stack_n=6):
        if e.key in OPS and e.self_cpu_time_total > 1000:
            print(f"{e.key} self {e.self_cpu_time_total / 1e3:.1f} ms total, {e.count} calls")
            for fr in e.stack[:6]:
                print("    ", fr)
