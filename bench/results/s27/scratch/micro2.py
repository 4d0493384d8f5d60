import torch, time, torch.nn.functional as F
def bench(f, n=50):
    for _ in range(5): f()
    best=1e9
    for r in range(3):
        t=time.perf_counter()
        for _ in range(n): f()
        best=min(best,(time.perf_counter()-t)/n)
    return best*1e3
torch.set_num_threads(2)
x=torch.randn(1024,256); w=torch.randn(1536,256)
gu=torch.randn(1024,1536); d=768
def gemm(): return F.linear(x,w)
def act(): return F.silu(gu[:, :d]) * gu[:, d:]
def act_inplace():
    a=F.silu(gu[:, :d]); a.mul_(gu[:, d:]); return a
print("gemm", bench(gemm), "act", bench(act), "act_inplace", bench(act_inplace))
