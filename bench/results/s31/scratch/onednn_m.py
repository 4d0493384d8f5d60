"""Scratch (session 31): a verify's row count M the target never saw vs one it saw, through vLLM's
CPU onednn_mm (4 weight shapes like a small Llama's linears, 30 layers each): ms per pass
first at M, again, and again after 150 other M (ONEDNN_PRIMITIVE_CACHE_CAPACITY as set)."""
import time, torch
import vllm._custom_ops as ops
torch.set_num_threads(1)
shapes = [(576, 1728), (576, 576), (576, 3072), (1536, 576)]  # (in, out): qkv-ish, o, gate_up, down
hs = [(ops.create_onednn_mm(torch.randn(o, i).t(), 32), i) for _ in range(30) for i, o in shapes]
def t(M):
    xs = {i: torch.randn(M, i) for i, _ in shapes}
    a = time.perf_counter()
    for h, i in hs:
        ops.onednn_mm(h, xs[i], None)
    return (time.perf_counter() - a) * 1e3
for M in range(1, 65):
    t(M)
print("warm M=1..64 seen. M=77 first", f"{t(77):.2f}", "again", f"{t(77):.2f}", f"{t(77):.2f}")
print("M=40 (seen at start, 13 other M since)", f"{t(40):.2f}")
for M in range(100, 250):
    t(M)
print("after 150 other M: M=77", f"{t(77):.2f}", f"{t(77):.2f}", "M=40", f"{t(40):.2f}", f"{t(40):.2f}")
