"""Scratch (session 28): attn_micro.py with a 64 MB buffer touched before each call (cold caches). Usage: python attn_cold.py CTX."""
import sys, time, torch
sys.argv = [sys.argv[0], sys.argv[1], "1"]
exec(open("/tmp/s28/attn_micro.py").read().split("for th in")[0])
torch.set_num_threads(2)
flush = torch.empty(64 << 20 // 4 * 4)
for split in (1, 2):
    a = args(split); out = torch.empty(B * q, nh, D)
    ts = []
    for r in range(30):
        flush.add_(1.0)  # evict
        t = time.perf_counter(); run(a, out); ts.append(time.perf_counter() - t)
    ts.sort(); print(f"cold ctx {ctx} split{split}: median {ts[15]*1e3:.3f} ms min {ts[0]*1e3:.3f}")
