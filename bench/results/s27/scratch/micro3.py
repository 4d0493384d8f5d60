import torch, time
import vllm._custom_ops as ops
def bench(f, n=50):
    for _ in range(5): f()
    best=1e9
    for r in range(5):
        t=time.perf_counter()
        for _ in range(n): f()
        best=min(best,(time.perf_counter()-t)/n)
    return best*1e3
torch.set_num_threads(2)
L=torch.randn(960,832)
v=L[:, :801]
print("argmax view", bench(lambda: v.argmax(-1)), "contig", bench(lambda: L.argmax(-1)), "max view", bench(lambda: v.max(-1)))
c=v.contiguous(); print("argmax contig801", bench(lambda: c.argmax(-1)))
w=torch.randn(1536,256); h=ops.create_onednn_mm(w.t(), 32); x=torch.randn(1024,256); out=torch.empty(1024,1536)
print("onednn alloc", bench(lambda: ops.onednn_mm(h, x, None)), "prealloc", bench(lambda: torch.ops._C.onednn_mm(out, x, None, h.handler_tensor)), "F.linear", bench(lambda: torch.nn.functional.linear(x, w)))
