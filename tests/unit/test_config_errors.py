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


def _damage(path, how):
    f = os.path.join(path, "model.safetensors")
    data = open(f, "rb").read()
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "empty":
        data = b""
    elif how == "garbled":
        data = b"\xff" * 64 + data[64:]
    open(f, "wb").write(data)
    return path


@pytest.mark.parametrize("how", ["truncated", "empty", "garbled"])
def test_unreadable_weights_are_one_line(tiny_dir, tmp_path, how):
    from dflash_vllm.config import check_drafter_weights

    path = _damage(_copy(tiny_dir, tmp_path), how)
    with pytest.raises(DFlashConfigError, match="cannot be read .*truncated or not safetensors") as e:
        check_drafter_weights(DrafterConfig.from_pretrained(path))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda c: c.update(intermediate_size=c["intermediate_size"] * 2), "has shape .* but .* implies"),
        (lambda c: c.update(num_hidden_layers=c["num_hidden_layers"] + 1), "lack .* tensors"),
        (lambda c: c.update(num_hidden_layers=c["num_hidden_layers"] - 1), "tensors this config does not describe"),
    ],
)
def test_weights_that_contradict_the_config(tiny_dir, tmp_path, edit, match):
    from dflash_vllm.config import check_drafter_weights

    with pytest.raises(DFlashConfigError, match=match):
        check_drafter_weights(DrafterConfig.from_pretrained(_copy(tiny_dir, tmp_path, edit=edit)))


def test_good_weights_pass(tiny_dir):
    from dflash_vllm.config import check_drafter_weights

    check_drafter_weights(DrafterConfig.from_pretrained(str(tiny_dir / "drafter")))


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"method": "dflsh"}, "unknown method 'dflsh'; did you mean 'dflash'"),
        ({"method": "dflash", "num_speculative_tokens": 0}, "num_speculative_tokens=0; set it to a whole number >= 1"),
        ({"method": "dflash", "num_speculative_tokens": -1}, "num_speculative_tokens=-1"),
        ({"method": "dflash", "num_speculative_tokens": "7"}, "num_speculative_tokens='7'"),
        ({"method": "dflash", "draft_sample_method": "probablistic"}, "use one of \\['greedy', 'probabilistic'\\]"),
    ],
)
def test_speculative_config_mistakes(spec, match):
    from dflash_vllm.config import check_speculative_config

    with pytest.raises(DFlashConfigError, match=match):
        check_speculative_config(spec)
    check_speculative_config({"method": "dflash", "num_speculative_tokens": 15, "draft_sample_method": "greedy"})


def test_weights_check_runs_once_per_unchanged_directory(tmp_path, monkeypatch):
    """serve's early check and the engine pre-flight share one read of the headers; a changed file is read again."""

    import safetensors

    from dflash_vllm import config as cfgmod
    from dflash_vllm.config import DrafterConfig, check_drafter_weights

    d = tmp_path / "drafter"
    shutil.copytree(os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "demo", "drafter"), d)
    opened = []
    real = safetensors.safe_open
    monkeypatch.setattr(safetensors, "safe_open", lambda *a, **k: opened.append(a[0]) or real(*a, **k))
    check_drafter_weights(DrafterConfig.from_pretrained(str(d)))
    check_drafter_weights(DrafterConfig.from_pretrained(str(d)))
    assert len(opened) == 1
    (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:1000])  # truncated: read again
    with pytest.raises(cfgmod.DFlashConfigError, match="cannot be read"):
        check_drafter_weights(DrafterConfig.from_pretrained(str(d)))
