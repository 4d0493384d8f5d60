"""Bad drafter input gets one clear line naming the fix, never a deep traceback."""

import json
import os
import shutil

import pytest

from dflash_vllm.config import DFlashConfigError, DrafterConfig, validate_pair

pytestmark = pytest.mark.unit


def _copy(tiny_dir, tmp_path, edit=None, drop_weights=False, raw=None):
    d = tmp_path / "d"
    shutil.copytree(tiny_dir / "drafter", d)
    if drop_weights:
        os.remove(d / "model.safetensors")
    cfg = json.loads((d / "config.json").read_text())
    if edit:
        edit(cfg)
    (d / "config.json").write_text(raw if raw is not None else json.dumps(cfg))
    return str(d)


def _pair(path, **kw):
    args = dict(target_num_layers=4, target_hidden_size=128, target_vocab_size=512, num_speculative_tokens=7)
    args.update(kw)
    validate_pair(DrafterConfig.from_pretrained(path), **args)


def test_good_pair_passes(tiny_dir):
    _pair(str(tiny_dir / "drafter"))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda t, p: str(p / "nope"), "does not exist"),
        (lambda t, p: _copy(t, p, raw="{not json"), "not valid JSON"),
        (lambda t, p: _copy(t, p, drop_weights=True), "has no weights"),
        (lambda t, p: _copy(t, p, lambda c: c.update(architectures=["LlamaForCausalLM"])), "expected \\['DFlashDraftModel'\\]"),
        (lambda t, p: _copy(t, p, lambda c: c["dflash_config"].pop("mask_token_id")), "mask_token_id is missing"),
    ],
)
def test_malformed_drafter_directory(tiny_dir, tmp_path, make, match):
    with pytest.raises(DFlashConfigError, match=match) as e:
        DrafterConfig.from_pretrained(make(tiny_dir, tmp_path))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(target_vocab_size=1000), "vocab_size 512 != target vocab_size 1000"),
        (dict(target_hidden_size=256), "hidden_size 128 != target hidden_size 256"),
        (dict(target_num_layers=2), "outside the target's layers 0..1"),
        (dict(num_speculative_tokens=16), "set num_speculative_tokens between 1 and 15"),
    ],
)
def test_mismatched_pair(tiny_dir, kw, match):
    with pytest.raises(DFlashConfigError, match=match):
        _pair(str(tiny_dir / "drafter"), **kw)


def test_mask_token_outside_vocab(tiny_dir, tmp_path):
    path = _copy(tiny_dir, tmp_path, lambda c: c["dflash_config"].update(mask_token_id=600))
    with pytest.raises(DFlashConfigError, match="mask_token_id 600 is outside the vocab"):
        _pair(path)


def test_round_trip_keeps_published_format(tiny_dir):
    cfg = DrafterConfig.from_pretrained(str(tiny_dir / "drafter"))
    out = cfg.to_hf_dict()
    assert out["architectures"] == ["DFlashDraftModel"]
    assert set(out["dflash_config"]) >= {"target_layer_ids", "mask_token_id"}
    assert DrafterConfig.from_dict(out).target_layer_ids == cfg.target_layer_ids
