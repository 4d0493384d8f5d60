"""`dflash-vllm train --feature-cache`: features computed once and read back give the same
drafter as online features; a sequence is found again from another data file; a cache made for
another target or layers is refused."""

import json
import random

import pytest
import torch
from safetensors.torch import load_file

from dflash_vllm.config import DFlashConfigError
from dflash_vllm.training.trainer import Recipe, train

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def data(tiny_dir, tmp_path_factory):
    r = random.Random(3)
    path = tmp_path_factory.mktemp("fc") / "data.jsonl"
    with open(path, "w") as f:
        for _ in range(12):
            f.write(json.dumps({"prompt_ids": [r.randrange(3, 500) for _ in range(r.randint(4, 12))],
                                "response_ids": [r.randrange(3, 500) for _ in range(r.randint(20, 40))]}) + "\n")
    return str(path)


def _run(tiny_dir, data, out, **kw):
    recipe = Recipe(block_size=8, num_draft_layers=1, num_anchors=4, batch_size=4, lr=2e-3, seed=0, target_layer_ids=[1, 3])
    record = train(str(tiny_dir / "target"), data, str(out), recipe, mask_token_id=511, max_steps=8, progress=False, **kw)
    return record, load_file(str(out / "model.safetensors"))


def test_cached_features_train_the_same_drafter(tiny_dir, data, tmp_path):
    _, online = _run(tiny_dir, data, tmp_path / "online")
    cache = tmp_path / "cache"
    rec, first = _run(tiny_dir, data, tmp_path / "cached1", feature_cache=str(cache))  # 8 steps = 2.7 epochs
    assert len(list(cache.glob("*.pt"))) == 12 and rec["features"].startswith("cached")
    for k in online:  # the cache only changes the padding the target saw, i.e. rounding
        torch.testing.assert_close(first[k], online[k], atol=1e-4, rtol=1e-4)
    _, second = _run(tiny_dir, data, tmp_path / "cached2", feature_cache=str(cache))  # all reads
    for k in first:
        assert torch.equal(first[k], second[k]), k


def test_cache_for_other_layers_is_refused(tiny_dir, data, tmp_path):
    cache = tmp_path / "cache"
    _run(tiny_dir, data, tmp_path / "a", feature_cache=str(cache))
    recipe = Recipe(block_size=8, num_draft_layers=1, num_anchors=4, batch_size=4, seed=0, target_layer_ids=[0, 2])
    with pytest.raises(DFlashConfigError, match="target_layer_ids"):
        train(str(tiny_dir / "target"), data, str(tmp_path / "b"), recipe, mask_token_id=511, max_steps=2,
              progress=False, feature_cache=str(cache))


def test_resume_reads_training_state_without_unpickling_code(tiny_dir, data, tmp_path, monkeypatch):
    """A finished run's train_state.pt is read back with weights_only=True (a file in the output
    directory can run no code), and resuming it gives the same drafter."""
    import os

    real_remove = os.remove
    with monkeypatch.context() as m:  # the run is "killed" after its last save: the state stays
        m.setattr(os, "remove", lambda p: None if str(p).endswith("train_state.pt") else real_remove(p))
        _, first = _run(tiny_dir, data, tmp_path / "run")
    assert (tmp_path / "run" / "train_state.pt").exists()
    loads = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **kw: loads.append(kw.get("weights_only")) or real_load(*a, **kw))
    _, resumed = _run(tiny_dir, data, tmp_path / "run")
    assert loads and all(w is True for w in loads), loads
    for k in first:
        assert torch.equal(first[k], resumed[k]), k


def test_a_larger_data_file_reuses_the_cached_sequences(tiny_dir, data, tmp_path, monkeypatch):
    """Entries are named by token ids: a data file that contains the cached one (a second batch of
    prompts appended) computes target features only for its new sequences."""
    import dflash_vllm.training.trainer as trainer

    cache = tmp_path / "cache"
    _run(tiny_dir, data, tmp_path / "a", feature_cache=str(cache))
    bigger = tmp_path / "bigger.jsonl"
    r = random.Random(4)
    new = [json.dumps({"prompt_ids": [r.randrange(3, 500) for _ in range(6)],
                       "response_ids": [r.randrange(3, 500) for _ in range(30)]}) for _ in range(4)]
    bigger.write_text(open(data).read() + "\n".join(new) + "\n")
    computed = []
    real = trainer.target_features
    monkeypatch.setattr(trainer, "target_features", lambda t, tokens, *a, **k: computed.append(len(tokens)) or real(t, tokens, *a, **k))
    _run(tiny_dir, str(bigger), tmp_path / "b", feature_cache=str(cache))
    assert sum(computed) == 4 and len(list(cache.glob("*.pt"))) == 16
