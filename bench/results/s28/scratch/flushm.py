"""Scratch (session 28): adsplit3.py with the drafter's write_context_kv and forward logged per call (rows, ms), to see new row counts cost oneDNN primitives. Usage: python flushm.py CONC (chat, adaptive)."""
import os, sys, time, json
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
sys.argv = [sys.argv[0], sys.argv[1], "chat", "adaptive"]
src = open("bench/results/s28/scratch/adsplit3.py").read()
src = src.replace('    llm = P._engine(', '''    from dflash_vllm.models import drafter as DM
    W = DM.DFlashDrafterModel.write_context_kv
    def wspy(self, feats, pos, slots, *a, **k):
        t = time.perf_counter(); r = W(self, feats, pos, slots, *a, **k); LOG.append((int(feats.shape[0]), round(1e3 * (time.perf_counter() - t), 3))); return r
    DM.DFlashDrafterModel.write_context_kv = wspy
    F = DM.DFlashDrafterModel.forward
    def fspy(self, ids, pos, *a, **k):
        t = time.perf_counter(); r = F(self, ids, pos, *a, **k); FLOG.append((int(ids.shape[0]), round(1e3 * (time.perf_counter() - t), 3))); return r
    DM.DFlashDrafterModel.forward = fspy
    llm = P._engine(''')
src = src.replace('print("RESULT"', 'print("WRITES", LOG[-60:]); print("FWD", FLOG[-20:]); print("RESULT"')
src = src.replace("T = collections.defaultdict(float); N = collections.Counter()", "T = collections.defaultdict(float); N = collections.Counter(); LOG = []; FLOG = []")
exec(compile(src, "adsplit3", "exec"))
