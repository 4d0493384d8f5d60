"""The vLLM drafter (``models/drafter.py``) against the PyTorch drafter (``torch_drafter.py``, what
training and the reference loop use) on the same weights and inputs, without an engine.

The vLLM model is built the way vLLM's own layer tests do it: a default ``VllmConfig`` as the
current config and a world-size-1 gloo process group (torn down afterwards). Its context K/V
go through ``write_context_kv`` into per-layer paged caches (random block tables, two steps,
padding rows), the block through ``forward`` under a forward context whose metadata comes
from the backend's own builder, as in ``DFlashProposer.propose``.
"""

import copy
import sys
import tempfile
import types

import pytest
import torch

from dflash_vllm.config import DrafterConfig
from dflash_vllm.torch_drafter import DFlashDrafter

pytestmark = pytest.mark.unit

BLOCK = 16  # KV cache block size
Q = 8  # the drafted block: anchor + 7 masks
CTX_LENS = [5, 23, 61]
TARGET_LAYERS = 4
VOCAB = 300


@pytest.fixture(scope="module")
def vllm_env():
    """A current vLLM config and a world-size-1 model-parallel group on CPU (gloo)."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps

    with set_current_vllm_config(VllmConfig()):
        owned = not ps.model_parallel_is_initialized()
        if owned:
            init_file = tempfile.mkstemp(prefix="dflash-dist-")[1]
            ps.init_distributed_environment(
                world_size=1, rank=0, distributed_init_method=f"file://{init_file}", local_rank=0, backend="gloo"
            )
            ps.initialize_model_parallel(1, 1)
        yield
        if owned:
            ps.destroy_model_parallel()
            ps.destroy_distributed_environment()


def make_pair(tmp_path, *, attention_bias: bool, num_layers: int = 2, seed: int = 0, custom_ops: str = "none"):
    """A PyTorch drafter with random weights (norm weights too, so a wrong or shared k-norm
    shows) saved in the published format, and the vLLM drafter loaded from the same tensors.
    ``custom_ops="all"`` dispatches RMSNorm/RoPE to vLLM's kernels (an eager engine's choice),
    ``"none"`` to their PyTorch definitions (a compiled engine's)."""
    from vllm.config import CacheConfig, CompilationConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers import rotary_embedding
    from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase

    from dflash_vllm.models.drafter import DFlashDrafterModel

    cfg = DrafterConfig(
        hidden_size=96, num_hidden_layers=num_layers, num_attention_heads=6, num_key_value_heads=2, head_dim=32,
        intermediate_size=160, vocab_size=VOCAB, rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=512,
        block_size=Q, num_target_layers=TARGET_LAYERS, target_layer_ids=[0, 2], mask_token_id=VOCAB - 1,
        attention_bias=attention_bias,
    )
    torch.manual_seed(seed)
    ref = DFlashDrafter(cfg).eval()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                p.normal_(0, 0.1)
    path = str(tmp_path / f"drafter_bias{int(attention_bias)}_l{num_layers}_{custom_ops}")
    ref.save_pretrained(path)

    vllm_config = VllmConfig(compilation_config=CompilationConfig(custom_ops=[custom_ops]))  # fresh per model: layer names register in its forward context
    fake = types.SimpleNamespace(  # the four things DFlashDrafterModel reads off its config
        speculative_config=types.SimpleNamespace(draft_model_config=types.SimpleNamespace(model=path)),
        model_config=types.SimpleNamespace(get_total_num_hidden_layers=lambda: TARGET_LAYERS, max_model_len=256),
        cache_config=CacheConfig(block_size=BLOCK),
        device_config=types.SimpleNamespace(device=torch.device("cpu")),
    )
    # get_rope caches modules process-wide, with the dispatch of the config they were built
    # under: start afresh so this model's RoPE follows this config.
    rotary_embedding._ROPE_DICT.clear()
    with set_current_vllm_config(vllm_config):
        model = DFlashDrafterModel(vllm_config=fake).eval()
    model.load_weights((k, v.clone()) for k, v in ref.state_dict().items())
    for module in model.modules():  # what vLLM's loader runs next (on CPU: the linear kernels' setup)
        quant_method = getattr(module, "quant_method", None)
        if isinstance(quant_method, QuantizeMethodBase):
            quant_method.process_weights_after_loading(module)
    g = torch.Generator().manual_seed(seed + 1)
    target = types.SimpleNamespace(  # the target's embedding and LM head, shared by both drafters
        embed=torch.randn(VOCAB, cfg.hidden_size, generator=g),
        lm_head=torch.randn(VOCAB, cfg.hidden_size, generator=g) / cfg.hidden_size**0.5,
    )
    target.embed_input_ids = lambda ids: target.embed[ids]
    target.compute_logits = lambda h: h @ target.lm_head.T
    model.bind_target(target)
    return cfg, ref, model, vllm_config, target


def bind_paged_caches(model, num_blocks, dtype=torch.float32):
    caches = []
    for layer in model.layers:
        a = layer.self_attn
        cache = torch.zeros(num_blocks, a.num_kv_heads, BLOCK, 2 * a.head_dim, dtype=dtype)
        a.attn.kv_cache = cache
        caches.append(cache)
    return caches


def random_block_table(ctx_lens, extra, g):
    """Random distinct physical blocks per request (block 0 is the null block: never used)."""
    need = [(n + extra + BLOCK - 1) // BLOCK for n in ctx_lens]
    num_blocks = 1 + sum(need) + 4
    perm = (torch.randperm(num_blocks - 1, generator=g) + 1).tolist()
    table = torch.zeros(len(ctx_lens), max(need) + 2, dtype=torch.int32)
    for r, nb in enumerate(need):
        table[r, :nb] = torch.tensor([perm.pop() for _ in range(nb)], dtype=torch.int32)
    return table, num_blocks


def slots_for(table, r, positions):
    return table[r, positions // BLOCK].long() * BLOCK + positions % BLOCK


def vllm_draft(model, vllm_config, features, ctx_lens, input_ids, g, block_len=None, from_anchors=False):
    """Context K/V written over two steps (with padding rows), then one block forward; returns
    the final hidden states [num_reqs, Q, H] (with ``block_len=Q``, the mask rows [num_reqs, Q - 1, H];
    ``from_anchors``: through ``forward_block``, the proposer's call, which reads only the anchors)."""
    from vllm.config import set_current_vllm_config
    from vllm.forward_context import set_forward_context
    from dflash_vllm.attention.backend import DraftBlockMetadata

    from dflash_vllm.attention.backend import DFlashAttentionMetadataBuilder

    num_reqs = len(ctx_lens)
    table, num_blocks = random_block_table(ctx_lens, Q, g)
    bind_paged_caches(model, num_blocks)
    # Step 1: a prefix of every request (a prefill); step 2: the rest (later verified tokens).
    steps = [[(r, 0, max(1, n // 2)) for r, n in enumerate(ctx_lens)], [(r, max(1, n // 2), n) for r, n in enumerate(ctx_lens)]]
    for step in steps:
        feats, pos, slots = [], [], []
        for r, a, b in step:
            p = torch.arange(a, b)
            feats.append(features[r][a:b])
            pos.append(p)
            slots.append(slots_for(table, r, p))
        num_pad = 3  # vLLM pads a batch: rows whose slot is -1
        feats.append(torch.randn(num_pad, features[0].shape[-1], generator=g))
        pos.append(torch.zeros(num_pad, dtype=torch.long))
        slots.append(torch.full((num_pad,), -1, dtype=torch.long))
        model.write_context_kv(torch.cat(feats), torch.cat(pos), torch.cat(slots))

    ctx = torch.tensor(ctx_lens, dtype=torch.int32)
    positions = (ctx[:, None].long() + torch.arange(Q)).view(-1)
    cad = DraftBlockMetadata(
        query_start_loc=torch.arange(num_reqs + 1, dtype=torch.int32) * Q,
        query_start_loc_cpu=torch.arange(num_reqs + 1, dtype=torch.int32) * Q,
        seq_lens=ctx + Q, context_lens=ctx, num_reqs=num_reqs, num_actual_tokens=num_reqs * Q, max_query_len=Q,
        max_seq_len=max(ctx_lens) + Q, block_table_tensor=table, slot_mapping=torch.zeros(0, dtype=torch.long),
        causal=False,
    )
    layer_names = [layer.self_attn.attn.layer_name for layer in model.layers]
    builder = DFlashAttentionMetadataBuilder(types.SimpleNamespace(block_size=BLOCK), layer_names, vllm_config, torch.device("cpu"))
    md = builder.build_for_drafting(cad, draft_index=0)
    with set_current_vllm_config(vllm_config), set_forward_context(dict.fromkeys(layer_names, md), vllm_config, num_tokens=num_reqs * Q):
        if from_anchors:
            hidden = model.forward_block(input_ids[:, 0], positions, block_len)
        else:
            hidden = model(input_ids.view(-1), positions, block_len=block_len)
    return hidden.view(num_reqs, Q if block_len is None else Q - 1, -1)


def reference_draft(ref, target, features, ctx_lens, input_ids):
    out = []
    for r, n in enumerate(ctx_lens):
        ctx = ref.fuse(features[r][None])  # [1, C, H]
        positions = n + torch.arange(Q)[None]
        out.append(ref(target.embed_input_ids(input_ids[r][None]), positions, ctx, torch.arange(n)[None])[0])
    return torch.stack(out)


def random_inputs(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    features = [torch.randn(n, len(cfg.target_layer_ids) * cfg.hidden_size, generator=g) for n in CTX_LENS]
    input_ids = torch.full((len(CTX_LENS), Q), cfg.mask_token_id)
    input_ids[:, 0] = torch.randint(0, VOCAB - 1, (len(CTX_LENS),), generator=g)
    return features, input_ids, g


@pytest.mark.parametrize("attention", ["cpu_kernel", "pytorch"])
@pytest.mark.parametrize("custom_ops", ["none", "all"])
@pytest.mark.parametrize("attention_bias", [False, True])
@pytest.mark.parametrize("fused", ["cpp", "modules"])
@torch.inference_mode()
def test_vllm_drafter_matches_pytorch_drafter(vllm_env, tmp_path, monkeypatch, fused, attention_bias, custom_ops, attention):
    from dflash_vllm import envs
    from dflash_vllm.attention.backend import cpu_kernel_isa

    monkeypatch.setenv(envs.CPU_ATTN.name, "1" if attention == "cpu_kernel" else "0")
    monkeypatch.setenv(envs.FUSED_OPS.name, "1" if fused == "cpp" else "0")
    cfg, ref, model, vllm_config, target = make_pair(tmp_path, attention_bias=attention_bias, custom_ops=custom_ops)
    probe = torch.zeros(2, model.layers[0].self_attn.num_kv_heads, BLOCK, 2 * cfg.head_dim)
    assert (cpu_kernel_isa(probe, cfg.head_dim) is not None) == (attention == "cpu_kernel")
    assert model.fused == (fused == "cpp") and all(l.self_attn.fused == model.fused for l in model.layers)
    norm = model.layers[0].self_attn.k_norm
    assert (norm._forward_method.__name__ == "forward_native") == (custom_ops == "none")
    features, input_ids, g = random_inputs(cfg, seed=3)
    got = vllm_draft(model, vllm_config, features, CTX_LENS, input_ids, g)
    want = reference_draft(ref, target, features, CTX_LENS, input_ids)
    assert want.abs().max() > 0.1  # not a degenerate comparison
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(target.compute_logits(got), target.compute_logits(want), rtol=1e-4, atol=1e-4)
    # Same greedy drafts.
    assert torch.equal(target.compute_logits(got[:, 1:]).argmax(-1), target.compute_logits(want[:, 1:]).argmax(-1))


@pytest.mark.parametrize("num_layers", [3, 1])
@pytest.mark.parametrize("from_anchors", [True, False])
@pytest.mark.parametrize("q", [Q, 2])
@pytest.mark.parametrize("fused", ["cpp", "modules"])
@torch.inference_mode()
def test_mask_rows_only_equal_the_full_blocks_mask_rows(vllm_env, tmp_path, monkeypatch, fused, q, from_anchors, num_layers):
    """``forward(..., block_len=Q)`` (the last layer drops each block's anchor row after
    attention) and ``forward_block`` (the proposer's call since session 36: the same, with the
    first layer's norm, QKV projection and q/k norms over the anchors and one shared mask row)
    give the reference drafter's mask rows, and the same greedy drafts. One layer: the first
    layer is also the one that drops the anchors.
    Q = 2 (one draft per request): the mask rows of several requests are then a strided view of
    the block, which vLLM's C++ fused add-RMSNorm read as if contiguous; every request after the
    first drafted from the wrong rows (on the demo pair at K = 1, tau 1.38 at batch 8 against
    1.93 at batch 1 and for vLLM's native DFlash)."""
    from dflash_vllm import envs

    monkeypatch.setattr(sys.modules[__name__], "Q", q)
    monkeypatch.setenv(envs.FUSED_OPS.name, "1" if fused == "cpp" else "0")
    cfg, ref, model, vllm_config, target = make_pair(tmp_path, attention_bias=True, num_layers=num_layers)
    features, input_ids, g = random_inputs(cfg, seed=3)
    got = vllm_draft(model, vllm_config, features, CTX_LENS, input_ids, g, block_len=Q, from_anchors=from_anchors)
    want = reference_draft(ref, target, features, CTX_LENS, input_ids)[:, 1:]
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert torch.equal(target.compute_logits(got).argmax(-1), target.compute_logits(want).argmax(-1))


def old_context_k(model, target_features, positions):
    """``write_context_kv``'s context keys as computed before issue #12: k-norm and RoPE
    re-implemented by hand (kept here to show the switch to the layers' modules is exact)."""
    attns = [layer.self_attn for layer in model.layers]
    n, num_layers, nkv, hd = target_features.shape[0], len(attns), attns[0].num_kv_heads, attns[0].head_dim
    fused = model.hidden_norm(model.fc(target_features))
    kv = torch.nn.functional.linear(fused, model._ctx_kv_weight, model._ctx_kv_bias).view(n, num_layers, 2, nkv, hd)
    k = kv[:, :, 0]
    kf = k.float()
    k_norm_weight = torch.stack([a.k_norm.weight.data for a in attns])
    eps = attns[0].k_norm.variance_epsilon
    k = (kf * torch.rsqrt(kf.pow(2).mean(-1, keepdim=True) + eps)).to(k.dtype) * k_norm_weight[:, None]
    cos_sin = attns[0].rotary_emb.cos_sin_cache.index_select(0, positions)
    cos, sin = cos_sin.to(k.dtype).chunk(2, dim=-1)
    cos, sin = cos[:, None], sin[:, None]
    x1, x2 = k.reshape(n, num_layers * nkv, hd).chunk(2, dim=-1)
    k = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return k.view(n, num_layers, nkv, hd), kv[:, :, 1]


@pytest.mark.parametrize(
    "dtype, custom_ops, shared_rope, exact, fused",
    [
        (torch.float32, "none", True, True, False),
        (torch.float32, "all", True, True, False),
        (torch.float32, "all", False, True, False),  # the per-layer fallback, should a layer get its own RoPE module
        (torch.bfloat16, "none", True, True, False),
        # vLLM's kernels round once, in fp32, where the old code rounded after every bf16 op:
        # the new keys may differ by one bf16 ulp, and are now those of the block's own keys.
        (torch.bfloat16, "all", True, False, False),
        # the CPU default: vLLM's C++ RMSNorm (fp32 rounding differs from the PyTorch ops)
        (torch.float32, "all", True, False, True),
        (torch.bfloat16, "all", True, False, True),
    ],
)
@torch.inference_mode()
def test_context_kv_unchanged_by_using_the_layer_modules(vllm_env, tmp_path, monkeypatch, dtype, custom_ops, shared_rope, exact, fused):
    from dflash_vllm import envs

    monkeypatch.setenv(envs.CPU_ATTN.name, "0")  # the cache read back below in the PyTorch path's layout
    monkeypatch.setenv(envs.FUSED_OPS.name, "1" if fused else "0")
    torch.set_default_dtype(dtype)  # as vLLM's loader does while building a model
    try:
        cfg, _, model, _, _ = make_pair(tmp_path, attention_bias=False, num_layers=3, seed=5, custom_ops=custom_ops)
    finally:
        torch.set_default_dtype(torch.float32)
    assert model._ctx_kv_weight.dtype == dtype
    assert all(layer.self_attn.rotary_emb is model.layers[0].self_attn.rotary_emb for layer in model.layers)
    if not shared_rope:
        model.layers[1].self_attn.rotary_emb = copy.deepcopy(model.layers[1].self_attn.rotary_emb)
    g = torch.Generator().manual_seed(0)
    n = 41  # padded to 44 rows in write_context_kv (bucket_rows): the padding must not show
    feats = torch.randn(n, 2 * cfg.hidden_size, generator=g).to(dtype)
    positions = torch.randperm(200, generator=g)[:n]
    caches = bind_paged_caches(model, num_blocks=1 + (n + BLOCK - 1) // BLOCK, dtype=dtype)
    slots = torch.arange(n) + BLOCK  # block 0 is the null block
    model.write_context_kv(feats, positions, slots)
    want_k, want_v = old_context_k(model, feats, positions)
    assert model.fused == fused
    if exact:
        tol = v_tol = dict(rtol=0, atol=0)
        if custom_ops == "all":
            # vLLM's CPU rotary kernel: bit-equal to the PyTorch ops on the earlier sessions' CPUs,
            # within fp32 rounding (2.4e-7 at most) on an AVX-512 EPYC; V does not go through it
            tol = dict(rtol=1.3e-6, atol=1e-5)
    elif not fused:
        tol, v_tol = dict(rtol=2**-7, atol=2**-7), dict(rtol=0, atol=0)
    else:  # the C++ norm (also hidden_norm, so V too): fp32 rounding, or one bf16 ulp
        tol = v_tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2**-6, atol=2**-5)
    for i, cache in enumerate(caches):
        got = cache[slots // BLOCK, :, slots % BLOCK]
        torch.testing.assert_close(got[..., : cfg.head_dim], want_k[:, i], **tol)
        torch.testing.assert_close(got[..., cfg.head_dim :], want_v[:, i], **v_tol)


def test_row_argmax_is_argmax_with_ties_and_nan():
    """The drafts' argmax on CPU goes through max(-1): same index, the first maximum, NaN first."""
    from dflash_vllm.proposers.dflash import row_argmax

    g = torch.Generator().manual_seed(0)
    padded = torch.randint(0, 4, (960, 832), generator=g).float()  # many ties per row
    x = padded[:, :801]  # a view, as vLLM's logits past a padded vocabulary
    x[3, 7] = float("nan")
    x[5, 0] = x[5, 800] = 10.0
    assert torch.equal(row_argmax(x), x.argmax(dim=-1))
    assert row_argmax(x)[3] == 7 and row_argmax(x)[5] == 0


def test_bucket_rows_adds_at_most_an_eighth_and_keeps_eight_counts_per_octave():
    from dflash_vllm.models.drafter import bucket_rows

    assert [bucket_rows(n) for n in range(1, 17)] == list(range(1, 17))
    for n in range(17, 5000):
        b = bucket_rows(n)
        assert n <= b <= n + n / 8, (n, b)
        assert bucket_rows(b) == b
    for lo in (16, 32, 64, 128, 1024):
        assert len({bucket_rows(n) for n in range(lo + 1, 2 * lo + 1)}) == 8
