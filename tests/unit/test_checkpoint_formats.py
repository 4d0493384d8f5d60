"""What a drafter checkpoint directory is and which ones we load (dflash_vllm/checkpoint.py).

- ours describe themselves: variant, rope scaling, training commit; the input-fusion ablation
  is refused for serving in one line, old checkpoints without the block still load;
- speculators 0.9.0 DFlash checkpoints (``speculators train --speculator-type dflash``) load:
  config reader, pre-flight weight check, the PyTorch loader and the vLLM drafter's
  ``load_weights`` name map; what we cannot serve is refused in one line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
import torch
from safetensors.torch import save_file

import dflash_vllm
from dflash_vllm import paths
from dflash_vllm.checkpoint import INPUT_FUSION_ARCHITECTURE, rope_of
from dflash_vllm.config import DFlashConfigError, DrafterConfig, check_drafter_weights, validate_pair
from dflash_vllm.torch_drafter import DFlashDrafter, rope_cos_sin, scaled_rope

pytestmark = pytest.mark.unit

REPO = paths.REPO or os.path.dirname(paths.PACKAGE)
DEMO_DRAFTER = paths.DEMO_DRAFTER


def tiny_cfg(**kw) -> DrafterConfig:
    args = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                intermediate_size=128, vocab_size=96, rope_theta=10000.0, max_position_embeddings=512, block_size=8,
                num_target_layers=4, target_layer_ids=[0, 2], mask_token_id=95)
    args.update(kw)
    return DrafterConfig(**args)


def random_drafter(cfg: DrafterConfig, **kw) -> DFlashDrafter:
    torch.manual_seed(0)
    model = DFlashDrafter(cfg, **kw)
    with torch.no_grad():
        for p in model.parameters():  # norms too: a name mix-up between two norms must show
            p.normal_(0, 0.1)
    return model


def config_json(path) -> dict:
    with open(os.path.join(path, "config.json")) as f:
        return json.load(f)


def one_line_refusal(call, match: str) -> str:
    with pytest.raises(DFlashConfigError, match=match) as e:
        call()
    assert "\n" not in str(e.value)
    return str(e.value)


# -- task 1: checkpoints that describe themselves ----------------------------------------------------
def test_save_records_every_layer_variant_and_training_commit(tmp_path):
    path = str(tmp_path / "d")
    random_drafter(tiny_cfg()).save_pretrained(path)
    cfg = config_json(path)
    assert cfg["architectures"] == ["DFlashDraftModel"]
    block = cfg["dflash_vllm"]
    assert block["variant"] == "kv_injection_every_layer"
    assert block["dflash_vllm_version"] == dflash_vllm.__version__
    commit = block["training_commit"]
    assert commit is None or re.fullmatch(r"[0-9a-f]{40}", commit)
    if os.path.isdir(os.path.join(REPO, ".git")) and shutil.which("git"):  # run from a checkout: its HEAD
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        assert commit == head
        assert isinstance(block["training_commit_dirty"], bool)
    read = DrafterConfig.from_pretrained(path)
    assert read.variant == "kv_injection_every_layer" and read.rope_scaling is None
    check_drafter_weights(read)


def test_input_fusion_only_is_recorded_and_refused_in_one_line(tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "ablation")
    random_drafter(tiny_cfg(), inject_every_layer=False).save_pretrained(path)
    cfg = config_json(path)
    assert cfg["dflash_vllm"]["variant"] == "input_fusion_only"
    # not the published architecture: vLLM's native DFlash and `dflash` refuse it too
    assert cfg["architectures"] == [INPUT_FUSION_ARCHITECTURE]

    match = r"variant 'input_fusion_only' .* cannot be served.*retrain with inject_every_layer=True"
    one_line_refusal(lambda: DrafterConfig.from_pretrained(path), match)

    from dflash_vllm._plugin import _precheck_drafter_path

    one_line_refusal(lambda: _precheck_drafter_path({"method": "dflash", "model": path}), match)
    # a config read for evaluation still reaches validate_pair / the weight check: refused there too
    evaluated = DrafterConfig.from_pretrained(path, serving=False)
    one_line_refusal(lambda: check_drafter_weights(evaluated), match)
    one_line_refusal(lambda: validate_pair(evaluated, target_num_layers=4, target_hidden_size=64,
                                           target_vocab_size=96, num_speculative_tokens=7), match)

    # `dflash-vllm serve`: exit status 2 and one line, before vLLM is imported
    from dflash_vllm import cli

    monkeypatch.delenv("DFLASH_VLLM_NATIVE", raising=False)
    spec = json.dumps({"method": "dflash", "model": path, "num_speculative_tokens": 7})
    assert cli.main(["serve", "some/target", "--speculative-config", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and re.search(match, err), err

    # evaluation and training read it as what it is
    model = DFlashDrafter.from_pretrained(path)
    assert model.inject_every_layer is False


def test_old_ablation_without_the_block_is_refused_too(tmp_path):
    """Saved before the block existed: the training recipe we recorded says which variant it is."""
    path = str(tmp_path / "old_ablation")
    random_drafter(tiny_cfg(), inject_every_layer=False).save_pretrained(
        path, extra_config={"dflash_vllm_training": {"recipe": {"inject_every_layer": False}, "steps": 1}})
    cfg = config_json(path)
    del cfg["dflash_vllm"]
    cfg["architectures"] = ["DFlashDraftModel"]  # as the old writer labelled it
    (tmp_path / "old_ablation" / "config.json").write_text(json.dumps(cfg))
    one_line_refusal(lambda: DrafterConfig.from_pretrained(path), "variant 'input_fusion_only'")


def test_old_checkpoints_without_the_block_still_load(tmp_path):
    demo = DrafterConfig.from_pretrained(DEMO_DRAFTER)  # the shipped demo pair (no block)
    assert "dflash_vllm" not in config_json(DEMO_DRAFTER)
    assert demo.variant == "kv_injection_every_layer" and demo.source_format == "dflash"
    check_drafter_weights(demo)

    path = str(tmp_path / "plain")  # a z-lab style config: no block, no training record
    random_drafter(tiny_cfg()).save_pretrained(path)
    cfg = config_json(path)
    del cfg["dflash_vllm"]
    (tmp_path / "plain" / "config.json").write_text(json.dumps(cfg))
    read = DrafterConfig.from_pretrained(path)
    assert read.variant == "kv_injection_every_layer"
    check_drafter_weights(read)


def test_unknown_variant_is_refused(tmp_path):
    path = str(tmp_path / "d")
    random_drafter(tiny_cfg()).save_pretrained(path, extra_config={"dflash_vllm": {"variant": "tree_v9"}})
    one_line_refusal(lambda: DrafterConfig.from_pretrained(path, serving=False), "unknown to this dflash-vllm")


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}


@pytest.mark.parametrize(
    "target",
    [
        {"rope_parameters": {**YARN, "rope_theta": 10000.0}},  # transformers 5 spelling
        {"rope_theta": 10000.0, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}},
    ],
    ids=["rope_parameters", "legacy_rope_scaling"],
)
def test_rope_scaling_is_recorded_and_used(tmp_path, target):
    theta, scaling = rope_of(target)
    assert (theta, scaling) == (10000.0, YARN)
    cfg = tiny_cfg(rope_theta=theta, rope_scaling=scaling)
    path = str(tmp_path / "d")
    random_drafter(cfg).save_pretrained(path)
    written = config_json(path)
    assert written["rope_scaling"] == YARN and written["rope_theta"] == 10000.0
    read = DrafterConfig.from_pretrained(path)
    assert read.rope_scaling == YARN
    check_drafter_weights(read)  # builds the drafter on the meta device: scaled rope tables must still build
    assert read.rope_parameters == {**YARN, "rope_theta": 10000.0}  # what vLLM's get_rope takes

    # what transformers (hence vLLM's native DFlash and `dflash`) reads from that config.json
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

    hf = Qwen3Config(**{k: v for k, v in written.items() if k not in ("architectures", "dflash_config", "dflash_vllm")})
    assert hf.rope_parameters == {**YARN, "rope_theta": 10000.0}
    # ... and the training-side drafter rotates exactly as HF's rotary embedding does
    positions = torch.arange(300)[None]
    hf_rope, ours = Qwen3RotaryEmbedding(hf), scaled_rope(read)
    assert torch.equal(ours[0], hf_rope.inv_freq) and ours[1] == hf_rope.attention_scaling  # the tables' inputs, exactly
    hf_cos, hf_sin = hf_rope(torch.zeros(1, dtype=torch.float32), positions)
    cos, sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta, torch.float32, ours)
    # The same formula on the same inputs; fp32 cos/sin of arguments up to ~300 rad once read
    # 1.7e-4 apart between the two calls (one machine, depending on which tests ran before), so
    # the tables are compared within 1e-3 (a wrong scaling moves them by far more: up to 2, see plain_cos below).
    torch.testing.assert_close(cos, hf_cos, rtol=0, atol=1e-3)
    torch.testing.assert_close(sin, hf_sin, rtol=0, atol=1e-3)
    plain_cos, _ = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta, torch.float32)
    assert not torch.allclose(cos, plain_cos)  # the scaling is really applied


def test_plain_rope_stays_plain():
    assert rope_of({"rope_theta": 1e6}) == (1e6, None)
    assert rope_of({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}) == (1e6, None)
    assert scaled_rope(tiny_cfg()) is None
    assert "rope_scaling" not in tiny_cfg().to_hf_dict()


# -- task 2: speculators-format checkpoints -------------------------------------------------------------
def speculators_config(cfg: DrafterConfig, **top) -> dict:
    """config.json as speculators 0.9.0 writes it for `DFlashDraftModel(config).save_pretrained`
    (key for key what it wrote for a tiny Qwen3 DFlash speculator, sizes from ``cfg``)."""
    out = {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"": "config.DFlashSpeculatorConfig"},
        "aux_hidden_state_layer_ids": [i + 1 for i in cfg.target_layer_ids],  # embedding output = 0
        "block_size": cfg.block_size,
        "draft_vocab_size": cfg.vocab_size,
        "dtype": "float32",
        "mask_token_id": cfg.mask_token_id,
        "sample_from_anchor": False,
        "sliding_window_non_causal": False,
        "speculators_config": {
            "algorithm": "dflash",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"accept_tolerance": 0.0, "proposal_type": "greedy",
                                  "speculative_tokens": cfg.block_size - 1, "verifier_accept_k": 1}],
            "verifier": {"architectures": ["Qwen3ForCausalLM"], "name_or_path": "/models/verifier"},
        },
        "speculators_model_type": "dflash",
        "speculators_version": "0.9.0",
        "target_hidden_size": None,
        "tie_word_embeddings": False,
        "transformer_layer_config": {
            "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": None, "eos_token_id": None,
            "head_dim": cfg.head_dim, "hidden_act": "silu", "hidden_size": cfg.hidden_size, "initializer_range": 0.02,
            "intermediate_size": cfg.intermediate_size, "layer_types": ["full_attention"] * cfg.num_hidden_layers,
            "max_position_embeddings": cfg.max_position_embeddings, "max_window_layers": 28, "model_type": "qwen3",
            "num_attention_heads": cfg.num_attention_heads, "num_hidden_layers": cfg.num_hidden_layers,
            "num_key_value_heads": cfg.num_key_value_heads, "pad_token_id": None, "rms_norm_eps": cfg.rms_norm_eps,
            "rope_parameters": {"rope_theta": cfg.rope_theta, "rope_type": "default"}, "sliding_window": None,
            "tie_word_embeddings": False, "use_cache": True, "use_sliding_window": False, "vocab_size": cfg.vocab_size,
        },
        "transformers_version": "5.19.0",
    }
    out.update(top)
    return out


def write_speculators(path, model: DFlashDrafter, config: dict | None = None, extra: dict | None = None) -> str:
    """A speculators-format checkpoint of ``model``: its tensors under speculators' names (the body
    is named like ours; no embedding, no LM head, no verifier norm for a full draft vocabulary)."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config or speculators_config(model.cfg), f, indent=2)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file({**state, **(extra or {})}, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    return str(path)


def test_speculators_checkpoint_reads_as_our_config(tmp_path):
    cfg = tiny_cfg()
    path = write_speculators(tmp_path / "spec", random_drafter(cfg))
    read = DrafterConfig.from_pretrained(path)
    assert read.source_format == "speculators"
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                "intermediate_size", "vocab_size", "rms_norm_eps", "rope_theta", "max_position_embeddings",
                "block_size", "target_layer_ids", "mask_token_id", "attention_bias", "rope_scaling", "variant"):
        assert getattr(read, key) == getattr(cfg, key), key
    check_drafter_weights(read)  # the pre-flight used by serve
    validate_pair(read, target_num_layers=4, target_hidden_size=64, target_vocab_size=96, num_speculative_tokens=7)
    # and as the published format (what vLLM's native loader and `dflash` read)
    published = read.to_hf_dict()
    assert published["dflash_config"]["target_layer_ids"] == cfg.target_layer_ids
    assert "speculators_config" not in published and "transformer_layer_config" not in published


def test_speculators_tensors_map_onto_ours(tmp_path):
    from dflash_vllm.checkpoint import read_drafter_state_dict

    original = random_drafter(tiny_cfg())
    # speculators may also carry tensors the target owns (a converted checkpoint, an older writer)
    extra = {"embed_tokens.weight": torch.zeros(96, 64), "verifier_norm.weight": torch.ones(64)}
    path = write_speculators(tmp_path / "spec", original, extra=extra)
    check_drafter_weights(DrafterConfig.from_pretrained(path))
    mapped = read_drafter_state_dict(path)
    expected = original.state_dict()
    assert set(mapped) == set(expected)
    for key, tensor in expected.items():
        assert torch.equal(mapped[key], tensor), key
    loaded = DFlashDrafter.from_pretrained(path)
    for key, tensor in expected.items():
        assert torch.equal(loaded.state_dict()[key], tensor), key


def test_vllm_drafter_load_weights_maps_speculators_names(tmp_path):
    """models/drafter.py ``load_weights`` on the tensors vLLM's loader reads from a speculators
    directory: each lands on our fused parameter and shard; target-owned ones are skipped."""
    from safetensors.torch import load_file

    from dflash_vllm.models.drafter import _STACKED, DFlashDrafterModel

    original = random_drafter(tiny_cfg())
    path = write_speculators(tmp_path / "spec", original, extra={"verifier_norm.weight": torch.ones(64)})
    tensors = load_file(os.path.join(path, "model.safetensors"))

    def fused(name: str) -> tuple[str, object]:
        for old, (new, shard) in _STACKED.items():
            if old in name:
                return name.replace(old, new), shard
        return name, None

    received: list[tuple[str, object, torch.Tensor]] = []

    class Param:
        def __init__(self, name):
            self.weight_loader = lambda param, w, shard=None: received.append((name, shard, w))

    class FakeDrafter:  # the parameter names of DFlashDrafterModel, without building vLLM layers
        params = {fused(k)[0]: Param(fused(k)[0]) for k in original.state_dict()}
        built = False

        def named_parameters(self):
            return self.params.items()

        def _build_context_kv_weights(self):
            self.built = True

    fake = FakeDrafter()
    loaded = DFlashDrafterModel.load_weights(fake, tensors.items())
    assert fake.built and loaded == set(fake.params)
    got = {(name, shard): w for name, shard, w in received}
    assert len(got) == len(received) == len(original.state_dict())
    for key, tensor in original.state_dict().items():
        assert torch.equal(got[fused(key)], tensor), key


@pytest.mark.parametrize(
    "edit, extra, match",
    [
        (lambda c: c.update(draft_vocab_size=64), {"lm_head.weight": torch.zeros(64, 64), "d2t": torch.zeros(64, dtype=torch.long),
                                                   "t2d": torch.ones(96, dtype=torch.bool)}, "draft_vocab_size 64 != vocab_size 96"),
        (lambda c: c["transformer_layer_config"].update(layer_types=["sliding_attention", "full_attention"], sliding_window=64),
         None, r"layers \[0\] use sliding-window attention"),
        (lambda c: c["transformer_layer_config"].update(layer_types=None, use_sliding_window=True, sliding_window=64),
         None, "sliding-window attention"),
        (lambda c: c.update(sample_from_anchor=True), None, "sample_from_anchor is true"),
        (lambda c: c.update(speculators_model_type="dflash2"), None, "speculators_model_type is 'dflash2'"),
        (lambda c: c.update(speculators_model_type="eagle3"), None, "speculators_model_type is 'eagle3'"),
        (lambda c: c.update(aux_hidden_state_layer_ids=[0, 3]), None, "includes 0 .*embedding output"),
        (lambda c: c.update(target_hidden_size=128), None, "target_hidden_size 128 != hidden_size 64"),
        (lambda c: c.update(mask_token_id=None), None, "mask_token_id is missing"),
        (lambda c: c["transformer_layer_config"].update(hidden_act="gelu"), None, "hidden_act is 'gelu'"),
    ],
    ids=["reduced_vocab", "sliding_layer_types", "use_sliding_window", "sample_from_anchor", "dflash2", "eagle3",
         "aux_embedding", "target_hidden_size", "no_mask_token", "gelu"],
)
def test_speculators_features_we_cannot_serve_are_refused(tmp_path, edit, extra, match):
    model = random_drafter(tiny_cfg())
    config = speculators_config(model.cfg)
    edit(config)
    path = write_speculators(tmp_path / "spec", model, config=config, extra=extra)
    one_line_refusal(lambda: DrafterConfig.from_pretrained(path), match)


def test_published_sliding_window_drafter_is_refused(tmp_path):
    """z-lab's newer drafters (Gemma/Qwen3.5 style) mix in sliding-window layers: ours cannot serve them."""
    path = str(tmp_path / "swa")
    random_drafter(tiny_cfg()).save_pretrained(
        path, extra_config={"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 64})
    one_line_refusal(lambda: DrafterConfig.from_pretrained(path), "sliding-window attention")


def test_drafter_config_for_target_reads_dicts_and_configs_alike():
    """One place builds a new drafter's config from a target's (trainer and test models alike)."""
    from transformers import LlamaConfig

    from dflash_vllm.config import DEFAULT_ROPE_THETA, DrafterConfig

    hf = LlamaConfig(hidden_size=64, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=128, vocab_size=300, rope_theta=5e5,
                     rope_scaling={"rope_type": "linear", "factor": 2.0})
    a = DrafterConfig.for_target(hf, num_layers=2, block_size=8, mask_token_id=7)
    b = DrafterConfig.for_target(hf.to_dict(), num_layers=2, block_size=8, mask_token_id=7)
    assert a == b
    assert (a.model_type, a.head_dim, a.rope_theta, a.rope_scaling["rope_type"], a.target_layer_ids) == (
        "llama", 16, 5e5, "linear", [1, 3])
    bare = {k: v for k, v in hf.to_dict().items() if k not in ("rope_theta", "rope_scaling", "rope_parameters")}
    assert DrafterConfig.for_target(bare, num_layers=1, block_size=8, mask_token_id=7).rope_theta == DEFAULT_ROPE_THETA
