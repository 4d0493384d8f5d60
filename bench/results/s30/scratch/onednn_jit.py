"""Scratch (session 30): oneDNN matmul primitives per row count M (vLLM CPU onednn_mm, 16 layers): the first pass at M, again, and after 40 / 10 other M."""
import time, torch
import vllm._custom_ops as ops
torch.set_num_threads(1)
hs = [ops.create_onednn_mm(torch.randn(768, 256).t(), 32) for _ in range(16)]
def t(M):
    x = torch.randn(M, 256)
    a = time.perf_counter()
    for h in hs: ops.onednn_mm(h, x, None)
    return (time.perf_counter() - a) * 1e3
print("16 first", f"{t(16):.2f}", "again", f"{t(16):.2f}")
for M in range(200, 240): t(M)
print("16 after 40 other M (16 layers):", f"{t(16):.2f}", f"{t(16):.2f}")
for M in range(300, 310): t(M)
print("16 after 10 other M:", f"{t(16):.2f}", f"{t(16):.2f}")
