"""The executable specification: DFlash speculative decoding at batch 1 in plain PyTorch.

Deliberately naive (the target is re-run over the whole sequence every step) so that every
line maps to an equation in the paper notes: draft a block in one drafter pass (eqs. 9-10),
verify with one target pass, accept with min(1, p/q) and resample rejections from the
normalised residual (eqs. 6-8). It is the oracle for the vLLM path's tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import acceptance
from .torch_drafter import DFlashDrafter, target_layer_outputs


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """The distribution a request samples from: temperature, then top-k, then top-p. [..., V]."""
    scores = logits.float() / temperature
    if 0 < top_k < scores.shape[-1]:
        kth = scores.topk(top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = scores.softmax(-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p >= top_p  # keep the smallest prefix reaching top_p
        probs = probs.scatter(-1, order, sorted_p.masked_fill(drop, 0.0))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def accept_or_resample(p: torch.Tensor, q: torch.Tensor, token: int, u: float) -> tuple[bool, torch.Tensor]:
    """One speculative-sampling decision (eqs. 6-7): accept `token` w.p. min(1, p/q), else the residual."""
    if u * q[token] < p[token]:  # u < p/q without dividing by q
        return True, p
    residual = (p - q).clamp_min(0)
    return False, residual / residual.sum() if residual.sum() > 0 else p


@dataclass
class Result:
    token_ids: list[int]
    accepted: list[int] = field(default_factory=list)  # accepted drafts per verify step

    @property
    def tau(self) -> float:  # mean acceptance length, eq. 2 (accepted drafts + the target's token)
        return acceptance.tau(self.accepted, empty=1.0)


@torch.no_grad()
def generate(
    target,  # a transformers causal LM (Qwen3/LLaMA)
    drafter: DFlashDrafter,
    prompt: list[int],
    max_new_tokens: int,
    num_speculative_tokens: int | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    stop_token_ids: tuple[int, ...] = (),
    generator: torch.Generator | None = None,
) -> Result:
    K = num_speculative_tokens or drafter.cfg.block_size - 1
    layer_ids, mask_id = drafter.cfg.target_layer_ids, drafter.cfg.mask_token_id
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    greedy = temperature == 0.0

    def target_pass(ids):
        logits, feats = target_layer_outputs(target, torch.tensor([ids]), layer_ids)
        return logits[0], feats

    def pick(probs_or_logits):
        if greedy:
            return int(probs_or_logits.argmax())
        return int(torch.multinomial(probs_or_logits, 1, generator=generator))

    def dist(logits):
        return logits if greedy else sampling_probs(logits, temperature, top_p, top_k)

    tokens = list(prompt)
    logits, feats = target_pass(tokens)
    tokens.append(pick(dist(logits[-1])))
    res = Result(token_ids=[])
    while len(tokens) - len(prompt) < max_new_tokens and tokens[-1] not in stop_token_ids:
        n = len(tokens)  # the anchor (last token) sits at position n - 1; features known for 0..n-2
        block = torch.tensor([[tokens[-1]] + [mask_id] * K])
        positions = torch.arange(n - 1, n + K)[None]
        ctx = drafter.fuse(feats[:, : n - 1])
        hidden = drafter(embed(block), positions, ctx, torch.arange(n - 1)[None])
        q = dist(lm_head(hidden[0, 1:]))  # [K, V]: mask slot k predicts position n - 1 + k
        drafts = [pick(q[i]) for i in range(K)]
        logits, feats = target_pass(tokens + drafts)
        p = dist(logits[n - 1 : n + K])  # [K + 1, V]: target's law for positions n .. n + K
        new: list[int] = []
        for i, d in enumerate(drafts):
            if greedy:
                ok, fix = d == int(p[i].argmax()), p[i]
            else:
                u = float(torch.rand((), generator=generator))
                ok, fix = accept_or_resample(p[i], q[i], d, u)
            if not ok:
                new.append(pick(fix))
                break
            new.append(d)
        else:
            new.append(pick(p[K]))  # all accepted: the bonus token
        res.accepted.append(len(new) - 1)
        tokens += new
        feats = feats[:, : n + len(new) - 1]  # only verified tokens become context
        if any(t in stop_token_ids for t in new):
            break
    out = tokens[len(prompt) :][:max_new_tokens]
    for i, t in enumerate(out):
        if t in stop_token_ids:
            out = out[: i + 1]
            break
    res.token_ids = out
    return res
