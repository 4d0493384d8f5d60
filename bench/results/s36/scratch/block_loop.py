"""Session 36: forward_block (first layer over the anchors and one shared mask row) against
forward(ids, positions, block_len) (every row), the demo drafter's weights, no engine: both
on the same inputs, alternating, warm, 1 thread (as vLLM serves on CPU).

    python bench/results/s36/scratch/block_loop.py [ITERS]

Builds the vLLM drafter the way tests/unit/test_drafter_parity.py does (paged caches, the
backend's metadata builder, vLLM's CPU kernel), context 120 tokens per request; prints, per
batch n, the median over ITERS rounds of each forward's wall time and new/old."""
import statistics
import sys
import time
import types

import torch

sys.path.insert(0, ".")
from tests.unit import test_drafter_parity as T  # noqa: E402


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    torch.set_num_threads(1)
    from safetensors.torch import load_file
    from vllm.config import CacheConfig, CompilationConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    from vllm.forward_context import set_forward_context
    from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase

    from dflash_vllm import paths
    from dflash_vllm.attention.backend import DFlashAttentionMetadataBuilder, DraftBlockMetadata
    from dflash_vllm.config import DrafterConfig
    from dflash_vllm.models.drafter import DFlashDrafterModel

    import tempfile
    with set_current_vllm_config(VllmConfig()):
        ps.init_distributed_environment(world_size=1, rank=0, distributed_init_method=f"file://{tempfile.mkstemp()[1]}",
                                        local_rank=0, backend="gloo")
        ps.initialize_model_parallel(1, 1)
    cfg = DrafterConfig.from_pretrained(str(paths.DEMO_DRAFTER))
    vllm_config = VllmConfig(compilation_config=CompilationConfig(custom_ops=["all"]))
    fake = types.SimpleNamespace(
        speculative_config=types.SimpleNamespace(draft_model_config=types.SimpleNamespace(model=str(paths.DEMO_DRAFTER))),
        model_config=types.SimpleNamespace(get_total_num_hidden_layers=lambda: 4, max_model_len=1024),
        cache_config=CacheConfig(block_size=T.BLOCK), device_config=types.SimpleNamespace(device=torch.device("cpu")))
    with set_current_vllm_config(vllm_config):
        model = DFlashDrafterModel(vllm_config=fake).eval()
    import glob
    w = {}
    for f in glob.glob(str(paths.DEMO_DRAFTER) + "/*.safetensors"):
        w.update(load_file(f))
    model.load_weights(w.items())
    for m in model.modules():
        qm = getattr(m, "quant_method", None)
        if isinstance(qm, QuantizeMethodBase):
            qm.process_weights_after_loading(m)
    tw = {}
    for f in glob.glob(str(paths.DEMO_TARGET) + "/*.safetensors"):
        tw.update(load_file(f))
    emb = tw["model.embed_tokens.weight"]
    target = types.SimpleNamespace(embed_input_ids=lambda ids: emb[ids], compute_logits=lambda h: h)
    model.bind_target(target)
    Q = cfg.block_size
    T.Q = Q
    g = torch.Generator().manual_seed(0)
    print("n   old_ms  new_ms  new/old  max|diff|")
    for n in (1, 2, 4, 8, 16, 32, 64):
        ctx_lens = [120] * n
        table, num_blocks = T.random_block_table(ctx_lens, Q, g)
        T.bind_paged_caches(model, num_blocks)
        feats = torch.randn(sum(ctx_lens), len(cfg.target_layer_ids) * cfg.hidden_size, generator=g)
        pos = torch.cat([torch.arange(c) for c in ctx_lens])
        slots = torch.cat([T.slots_for(table, r, torch.arange(c)) for r, c in enumerate(ctx_lens)])
        model.write_context_kv(feats, pos, slots)
        ctx = torch.tensor(ctx_lens, dtype=torch.int32)
        positions = (ctx[:, None].long() + torch.arange(Q)).view(-1)
        cad = DraftBlockMetadata(
            query_start_loc=torch.arange(n + 1, dtype=torch.int32) * Q, query_start_loc_cpu=torch.arange(n + 1, dtype=torch.int32) * Q,
            seq_lens=ctx + Q, context_lens=ctx, num_reqs=n, num_actual_tokens=n * Q, max_query_len=Q,
            max_seq_len=max(ctx_lens) + Q, block_table_tensor=table, slot_mapping=torch.zeros(0, dtype=torch.long), causal=False)
        names = [l.self_attn.attn.layer_name for l in model.layers]
        md = DFlashAttentionMetadataBuilder(types.SimpleNamespace(block_size=T.BLOCK), names, vllm_config,
                                            torch.device("cpu")).build_for_drafting(cad, draft_index=0)
        anchors = torch.randint(0, cfg.vocab_size - 1, (n,), generator=g, dtype=torch.int32)
        old_t, new_t, diff = [], [], 0.0
        with torch.inference_mode(), set_current_vllm_config(vllm_config), \
                set_forward_context(dict.fromkeys(names, md), vllm_config, num_tokens=n * Q):
            for i in range(iters):
                for which in (("old", "new") if i % 2 else ("new", "old")):
                    t = time.perf_counter()
                    if which == "old":
                        ids = torch.full((n, Q), cfg.mask_token_id, dtype=torch.int32)  # the proposer's work before
                        ids[:, 0] = anchors
                        a = model(ids.view(-1), positions, block_len=Q)
                        old_t.append(time.perf_counter() - t)
                    else:
                        b = model.forward_block(anchors, positions, Q)
                        new_t.append(time.perf_counter() - t)
                if i == 0:
                    diff = (a - b).abs().max().item()
        mo, mn = statistics.median(old_t) * 1e3, statistics.median(new_t) * 1e3
        print(f"{n:3d} {mo:7.3f} {mn:7.3f} {mn / mo:8.3f}  {diff:.1e}")


if __name__ == "__main__":
    main()
