"""Training forward: no leakage between blocks or from the future, and parity with serving."""

import random

import pytest
import torch

from dflash_vllm.training.trainer import build_block_inputs, drafter_loss, loss_weights, target_features

pytestmark = pytest.mark.unit
ANCHORS = [8, 14, 15, 27]  # overlapping spans on purpose


def _train_logits(target, drafter, tokens, feats, anchors):
    bs = drafter.cfg.block_size
    block_ids, positions, _, mask = build_block_inputs(tokens, [anchors], bs, drafter.cfg.mask_token_id, [tokens.shape[1]])
    ctx = drafter.fuse(feats)
    hidden = drafter(target.get_input_embeddings()(block_ids), positions, ctx, torch.arange(tokens.shape[1])[None], mask)
    return target.get_output_embeddings()(hidden).view(len(anchors), bs, -1)


def _serve_logits(target, drafter, tokens, feats, anchor):
    """What serving computes for one block: context = verified tokens before the anchor."""
    bs = drafter.cfg.block_size
    block = torch.tensor([[int(tokens[0, anchor])] + [drafter.cfg.mask_token_id] * (bs - 1)])
    hidden = drafter(target.get_input_embeddings()(block), torch.arange(anchor, anchor + bs)[None],
                     drafter.fuse(feats[:, :anchor]), torch.arange(anchor)[None])
    return target.get_output_embeddings()(hidden)[0]


@pytest.fixture(scope="module")
def seq(tiny_models):
    target, drafter = tiny_models
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(3, 500, (1, 48), generator=g)
    return tokens, target_features(target, tokens, drafter.cfg.target_layer_ids)


@torch.no_grad()
def test_train_serve_parity(tiny_models, seq):
    target, drafter = tiny_models
    tokens, feats = seq
    train = _train_logits(target, drafter, tokens, feats, ANCHORS)
    for j, a in enumerate(ANCHORS):
        serve = _serve_logits(target, drafter, tokens, feats, a)
        err = (train[j] - serve).abs().max().item()
        assert err < 1e-4, f"block at anchor {a}: train/serve logits differ by {err:.2e} (tolerance 1e-4, fp32)"


@torch.no_grad()
def test_no_leakage_from_future_or_other_blocks(tiny_models, seq):
    target, drafter = tiny_models
    tokens, feats = seq
    base = _train_logits(target, drafter, tokens, feats, ANCHORS)
    for j, a in enumerate(ANCHORS):
        t2, f2 = tokens.clone(), feats.clone()
        f2[:, a:] += torch.randn_like(f2[:, a:])  # features at and after the anchor
        t2[:, a + 1 :] = (t2[:, a + 1 :] + 7) % 500  # tokens after the anchor (labels)
        for k, other in enumerate(ANCHORS):  # other blocks' anchors
            if k != j and other != a:
                t2[0, other] = (t2[0, other] + 11) % 500
        out = _train_logits(target, drafter, t2, f2, ANCHORS)
        err = (out[j] - base[j]).abs().max().item()
        assert err < 1e-5, f"block at anchor {a} changed by {err:.2e} when only its future/other blocks changed"
        # and the test can fail: the block does depend on its own context
        f3 = feats.clone()
        f3[:, a - 1] += 1.0
        assert (_train_logits(target, drafter, tokens, f3, ANCHORS)[j] - base[j]).abs().max() > 1e-4


def test_loss_weights_follow_the_paper():
    w = loss_weights(16, None)
    assert w.shape == (15,) and w[0] == 1.0
    assert abs(w[-1].item() - torch.exp(torch.tensor(-2.0)).item()) < 1e-6  # e^{-14/7}
    assert torch.equal(loss_weights(8, 0), torch.ones(7))


def test_loss_decreases_on_a_tiny_run(tiny_models, seq):
    target, drafter = tiny_models
    import copy

    d = copy.deepcopy(drafter).train()
    tokens, feats = seq
    opt = torch.optim.AdamW(d.parameters(), lr=3e-3)
    w = loss_weights(16, None)
    rng = random.Random(0)
    losses = []
    for _ in range(25):
        anchors = sorted(rng.sample(range(4, 46), 8))
        loss, _ = drafter_loss(d, target.get_input_embeddings(), target.get_output_embeddings(), feats, tokens, [anchors], [48], w)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, losses


@torch.no_grad()
def test_offline_tau_is_greedy_acceptance_against_the_data(tiny_models):
    """offline_tau (all anchors in one masked forward) equals drafting each block the way serving
    does and counting the leading drafts that match the data, anchor by anchor."""
    from dflash_vllm.training.trainer import offline_tau

    target, drafter = tiny_models
    bs = drafter.cfg.block_size
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(3, 500, (1, 60), generator=g)
    # make the data partly predictable: continue it with the drafter's own drafts at a few anchors,
    # so accepted lengths vary instead of all being 0
    feats = target_features(target, tokens, drafter.cfg.target_layer_ids)
    for a in (10, 30):
        drafts = _serve_logits(target, drafter, tokens, feats, a).argmax(-1)[1:]
        tokens[0, a + 1 : a + 1 + 5] = drafts[:5]
    feats = target_features(target, tokens, drafter.cfg.target_layer_ids)
    prompt_len, n = 6, tokens.shape[1]
    expected = []
    for a in range(prompt_len, n - bs + 1, 4):
        drafts = _serve_logits(target, drafter, tokens, feats, a).argmax(-1)[1:]
        k = 0
        while k < bs - 1 and int(drafts[k]) == int(tokens[0, a + 1 + k]):
            k += 1
        expected.append(k)
    want = round(1 + sum(expected) / len(expected), 3)
    got = offline_tau(drafter, target.get_input_embeddings(), target.get_output_embeddings(), feats, tokens, [n], [prompt_len], bs)
    assert got == pytest.approx(want, abs=1e-3)
    assert max(expected) >= 1, "the planted drafts should be accepted somewhere"


@torch.no_grad()
def test_loss_is_weighted_ce_of_the_kept_positions_and_the_head_sees_only_those(tiny_models, seq):
    """drafter_loss against CE computed by hand from the full-block logits; with the loss cut
    to the first N positions the LM head runs on exactly the labelled rows of those positions."""
    target, drafter = tiny_models
    tokens, feats = seq
    bs = drafter.cfg.block_size
    embed, head = target.get_input_embeddings(), target.get_output_embeddings()
    logits = _train_logits(target, drafter, tokens, feats, ANCHORS)[:, 1:]  # [A, B-1, V]
    labels = torch.stack([tokens[0, a + 1 : a + bs] for a in ANCHORS])  # every anchor leaves a whole block
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none").view(labels.shape)
    rows = []
    counting = lambda mod, args: rows.append(args[0].shape[0])  # noqa: E731
    for n in (0, 5):
        w = loss_weights(bs, None, n)
        assert (w[n:] == 0).all() if n else (w > 0).all()
        want = (ce * w).sum() / (w.sum() * len(ANCHORS))
        rows.clear()
        h = head.register_forward_pre_hook(counting)
        try:
            loss, acc = drafter_loss(drafter, embed, head, feats, tokens, [ANCHORS], [tokens.shape[1]], w)
        finally:
            h.remove()
        assert loss.item() == pytest.approx(want.item(), rel=1e-5)
        assert rows == [len(ANCHORS) * (n or bs - 1)]
        hits = (logits.argmax(-1) == labels).float().mean(0)
        keep = n or bs - 1
        assert torch.allclose(acc[:keep], hits[:keep])


def test_init_from_loads_a_checkpoint_and_refuses_another_shape(tiny_models, tmp_path):
    import dataclasses

    from dflash_vllm.config import DFlashConfigError
    from dflash_vllm.torch_drafter import DFlashDrafter
    from dflash_vllm.training.trainer import _load_initial_weights, initial_record

    _, drafter = tiny_models
    drafter.save_pretrained(str(tmp_path / "d"))
    assert initial_record(str(tmp_path / "d")) == {"path": str(tmp_path / "d")}
    (tmp_path / "d" / "training_record.json").write_text('{"steps": 500}')
    assert initial_record(str(tmp_path / "d"))["record"] == {"steps": 500}  # a chain of runs keeps its history
    fresh = DFlashDrafter(drafter.cfg)
    _load_initial_weights(fresh, str(tmp_path / "d"))
    for (k, a), b in zip(drafter.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a.float(), b), k
    other = DFlashDrafter(dataclasses.replace(drafter.cfg, num_hidden_layers=drafter.cfg.num_hidden_layers + 1))
    with pytest.raises(DFlashConfigError, match="num_hidden_layers"):
        _load_initial_weights(other, str(tmp_path / "d"))
