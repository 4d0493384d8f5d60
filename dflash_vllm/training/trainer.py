"""Train a DFlash drafter for any HF causal-LM target (paper Algorithm 2, eq. 12).

No vLLM here: data comes from `regen.py` (the target's own responses, generated through
vLLM) as jsonl lines ``{"prompt_ids": [...], "response_ids": [...]}``.

One training example is a whole sequence: its fused target features are the context, and
`num_anchors` blocks ``[clean anchor, mask x (B-1)]`` at random response positions are the
queries, all in one forward with one sparse mask:
- block j sees context positions strictly before its anchor a_j (at serving time the anchor
  is the token just sampled: its own hidden state does not exist yet);
- block j sees all of its own positions (bidirectional) and nothing of any other block.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from ..acceptance import tau
from ..config import DFlashConfigError, DrafterConfig
from ..options import add_options, opt, parse_into
from ..torch_drafter import DFlashDrafter, target_layer_outputs

# Loss decay per block size (paper appendix): w_k = exp(-(k-1)/lambda).
DEFAULT_LAMBDA = {16: 7.0, 10: 5.0, 8: 4.0}


@dataclass
class Recipe:
    """The training recipe; saved beside the checkpoint. Each field is also a `dflash-vllm train` option."""

    block_size: int = opt(16, "block size B: the anchor and B - 1 mask positions")
    num_draft_layers: int = opt(2, "drafter layers")
    num_anchors: int = opt(16, "blocks per sequence per step")
    decay: float | None = opt(None, "loss decay lambda in exp(-(k-1)/lambda); unset: the paper's for the block size; 0: uniform")
    random_anchors: bool = opt(True, "false: fixed block boundaries (ablation)")
    inject_every_layer: bool = opt(True, "false: target features fused into the input only (ablation; not servable)")
    lr: float = opt(6e-4, "peak learning rate (AdamW, cosine)")
    warmup_ratio: float = opt(0.04, "share of the steps in linear warm-up")
    grad_clip: float = opt(1.0, "gradient-norm clip")
    weight_decay: float = opt(0.0, "AdamW weight decay")
    epochs: float = opt(1.0, "passes over the data (when --max-steps is unset)")
    batch_size: int = opt(8, "sequences per step")
    seed: int = opt(0, "data order and initialisation")
    target_layer_ids: list[int] | None = opt(None, "target layers whose outputs the drafter reads; unset: spread from 1 to L - 3")
    loss_positions: int = opt(0, "train on mask positions 1..N only (0: all B - 1); the block stays B at serving")


@dataclass
class TrainJob:
    """What one `dflash-vllm train` run reads and writes (the recipe is separate: it is saved)."""

    target: str = opt(help="HF target model directory", required=True)
    data: str = opt(help="jsonl from `dflash-vllm regen` (prompt_ids, response_ids)", required=True)
    out: str = opt(help="output directory: checkpoint, record, train_state.pt (a rerun resumes)", required=True)
    max_steps: int | None = opt(None, "steps (unset: --epochs over the data)")
    mask_token_id: int | None = opt(None, "the mask token id (unset: the tokenizer's <|mask|>, else its pad token)")
    threads: int = opt(0, "torch threads (0: torch's default)")
    feature_cache: str | None = opt(None, "directory: compute target features once, read them back")
    feature_cache_dtype: str = opt("float32", "storage dtype of cached features (float16 halves the disk, at a small rounding)",
                                   choices=["float32", "float16", "bfloat16"])
    eval_data: str | None = opt(None, "held-out jsonl (same format as --data): offline greedy tau")
    eval_every: int = opt(0, "steps between offline tau evaluations (0: never)")
    snapshot_every: int = opt(0, "keep a servable drafter every N steps in OUT/step-N")
    init_from: str | None = opt(None, "drafter checkpoint to start from (a longer run on top of a shorter one)")
    device: str = opt("cpu", "torch device (cuda: the target's features online on the GPU, TF32 matmuls)")
    save_dtype: str = opt("float32", "dtype of the saved weights (float16 halves the checkpoint)",
                          choices=["float32", "float16", "bfloat16"])
    time_budget_s: float = opt(0.0, "fit the run into this many seconds: after 20 steps the schedule's length "
                               "becomes min(--max-steps, what the measured step time allows); 0: no limit")


def warmup_cosine(step: int, total: int, warm: int) -> float:
    """The learning-rate multiplier: linear warm-up over `warm` steps, then cosine to 0 at `total`
    (the drafter's and the demo target's schedule)."""
    if step < warm:
        return (step + 1) / warm
    return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


def loss_weights(block_size: int, decay: float | None, positions: int = 0) -> torch.Tensor:
    """[B-1] weights for mask positions k = 1..B-1; with `positions` = N > 0, zero past k = N.

    Cutting positions is a compute budget choice: the LM head is most of a training step's
    FLOPs and runs only where a weight is non-zero. A drafter whose tau is ~1.3 almost never
    has position 9 verified, so positions past 8 spend half a step on labels that do not move tau
    yet; the block (and serving) stays B wide."""
    lam = DEFAULT_LAMBDA.get(block_size, block_size / 2.0) if decay is None else decay
    k = torch.arange(1, block_size, dtype=torch.float32)
    w = torch.ones_like(k) if lam == 0 else torch.exp(-(k - 1) / lam)
    if positions:
        w[positions:] = 0.0
    return w


def target_features(target, input_ids: torch.Tensor, layer_ids: list[int], attention_mask=None) -> torch.Tensor:
    """[B, T, n * H] outputs of the selected target layers, exactly as vLLM hands them over."""
    with torch.no_grad():
        return target_layer_outputs(target, input_ids, layer_ids, attention_mask, logits=False)[1]


def pick_anchors(prompt_len: int, length: int, n: int, block_size: int, rng: random.Random, random_anchors: bool) -> list[int]:
    """Anchor positions inside the response: [prompt_len, length - 2] (each predicts >= 1 token)."""
    lo, hi = prompt_len, length - 2
    if hi < lo:
        return []
    if random_anchors:
        span = list(range(lo, hi + 1))
        return sorted(rng.sample(span, min(n, len(span))))
    starts = list(range(lo, hi + 1, block_size))  # fixed boundaries, as in plain block diffusion
    return sorted(rng.sample(starts, min(n, len(starts))))


def build_block_inputs(tokens: torch.Tensor, anchors_per_seq: list[list[int]], block_size: int, mask_token_id: int, seq_lens: list[int]):
    """Queries, positions, labels and the sparse mask for a padded batch.

    tokens [B, T]. Returns block_ids [B, A*block_size], positions [B, A*block_size], labels [B, A*block_size]
    (-100 where unused), mask [B, 1, A*block_size, T + A*block_size] (True = visible).
    """
    b, t = tokens.shape
    a = max(1, max(len(x) for x in anchors_per_seq))
    q = a * block_size
    block_ids = torch.full((b, q), mask_token_id, dtype=torch.long)
    positions = torch.zeros(b, q, dtype=torch.long)
    labels = torch.full((b, q), -100, dtype=torch.long)
    mask = torch.zeros(b, 1, q, t + q, dtype=torch.bool)
    offs = torch.arange(block_size)
    for i, anchors in enumerate(anchors_per_seq):
        for j, anc in enumerate(anchors):
            s = j * block_size
            block_ids[i, s] = tokens[i, anc]
            positions[i, s : s + block_size] = anc + offs
            tgt = anc + offs[1:]
            ok = tgt < seq_lens[i]
            labels[i, s + 1 : s + block_size][ok] = tokens[i, tgt[ok]]
            mask[i, 0, s : s + block_size, :anc] = True  # context strictly before the anchor
            mask[i, 0, s : s + block_size, t + s : t + s + block_size] = True  # own block only
        for j in range(len(anchors), a):  # unused blocks: see themselves, so softmax is defined
            s = j * block_size
            mask[i, 0, s : s + block_size, t + s : t + s + block_size] = True
    return block_ids, positions, labels, mask


def drafter_loss(drafter, embed, lm_head, feats, tokens, anchors_per_seq, seq_lens, weights):
    """Weighted CE over mask positions (eq. 12). Returns (loss, per-position accuracy [B-1])."""
    cfg = drafter.cfg
    block_size = weights.numel() + 1
    block_ids, positions, labels, mask = build_block_inputs(tokens, anchors_per_seq, block_size, cfg.mask_token_id, seq_lens)
    b, t = tokens.shape
    dev = feats.device
    block_ids, positions, labels, mask = block_ids.to(dev), positions.to(dev), labels.to(dev), mask.to(dev)
    weights = weights.to(dev)
    ctx = drafter.fuse(feats)
    ctx_pos = torch.arange(t, device=dev)[None].expand(b, -1)
    hidden = drafter(embed(block_ids), positions, ctx, ctx_pos, mask)
    a = labels.shape[1] // block_size
    hidden = hidden.view(b, a, block_size, -1)[:, :, 1:]
    labels = labels.view(b, a, block_size)[:, :, 1:]
    valid = (labels != -100) & (weights > 0)
    # the LM head (vocab x hidden, most of a step's FLOPs) only where there is a label: not on
    # anchors, padded blocks or blocks running past the sequence's end
    logits = lm_head(hidden[valid]).float()  # [N, V]
    lab = labels[valid]
    ce = F.cross_entropy(logits, lab, reduction="none")
    k = torch.arange(block_size - 1, device=dev).expand_as(labels)[valid]  # each label's position in its block, 0-based
    w = weights[k]
    loss = (ce * w).sum() / w.sum().clamp_min(1e-6)
    hits = (logits.argmax(-1) == lab).float()
    zeros = torch.zeros(block_size - 1, device=dev)
    correct = zeros.index_add(0, k, hits) / zeros.index_add(0, k, torch.ones_like(hits)).clamp_min(1)
    # positions with weight 0 are not evaluated: their accuracy reads 0
    return loss, correct


@torch.no_grad()
def offline_tau(drafter, embed, lm_head, feats, tokens, seq_lens, prompt_lens, block_size: int, stride: int = 4) -> float:
    """Greedy tau on held-out target outputs, without a serving engine.

    The data are the target's own greedy responses, so a block drafted at anchor a is accepted
    exactly as far as its argmax drafts match the data: accepted(a) = the longest k with
    draft[1..k] == tokens[a+1..a+k]. Averaged over anchors every `stride` response positions
    that leave a whole block (decoding visits a subset of them, so this is an estimate of the
    served tau, not the served number itself)."""
    was_training = drafter.training
    drafter.eval()
    accepted = []
    dev = feats.device
    for i in range(tokens.shape[0]):  # one sequence at a time: logits for every anchor are large
        n = seq_lens[i]
        anchors = [list(range(prompt_lens[i], n - block_size + 1, stride))]
        if not anchors[0]:
            continue
        tok = tokens[i : i + 1, :n].cpu()
        block_ids, positions, labels, mask = (x.to(dev) for x in build_block_inputs(tok, anchors, block_size, drafter.cfg.mask_token_id, [n]))
        hidden = drafter(embed(block_ids), positions, drafter.fuse(feats[i : i + 1, :n]), torch.arange(n, device=dev)[None], mask)
        drafts = lm_head(hidden).argmax(-1).view(-1, block_size)[:, 1:]
        accepted.append((drafts == labels.view(-1, block_size)[:, 1:]).long().cumprod(-1).sum(-1))
    drafter.train(was_training)
    return round(tau(torch.cat(accepted).tolist()), 3) if accepted else float("nan")


class FeatureCache:
    """Target features on disk, one file per training sequence, so later epochs (and later runs,
    on this data or on a larger file that contains it) skip the target's forward. Files are named
    by the sequence's token ids (a hash): the same sequence in another data file is found again.
    A manifest ties the cache to the target, its layers and the storage dtype; a cache made for
    something else is refused, not silently reused."""

    LAYOUT = "by-token-ids"

    def __init__(self, root: str, target_path: str, layer_ids: list[int], dtype: str = "float32"):
        self.root, self.dtype = root, getattr(torch, dtype)
        key = {"target": os.path.abspath(target_path), "target_layer_ids": list(layer_ids), "dtype": dtype,
               "layout": self.LAYOUT}
        os.makedirs(root, exist_ok=True)
        manifest = os.path.join(root, "manifest.json")
        if os.path.exists(manifest):
            with open(manifest) as f:
                old = json.load(f)
            if old != key:
                diff = sorted(k for k in key if old.get(k) != key[k])
                raise DFlashConfigError(f"feature cache {root} was made for another {', '.join(diff)}; "
                                        "pass an empty --feature-cache directory (or delete this one)")
        else:
            with open(manifest, "w") as f:
                json.dump(key, f, indent=1)

    def _path(self, seq: list[int]) -> str:
        import hashlib

        return os.path.join(self.root, hashlib.sha1(torch.tensor(seq, dtype=torch.int64).numpy().tobytes()).hexdigest() + ".pt")

    def get(self, target, seqs: list[list[int]], layer_ids: list[int]) -> torch.Tensor:
        """[B, T_max, n*H] float32, right-padded with zeros, like `target_features` on the batch."""
        missing = [j for j, x in enumerate(seqs) if not os.path.exists(self._path(x))]
        if missing:
            t = max(len(seqs[j]) for j in missing)
            tokens = torch.tensor([seqs[j] + [0] * (t - len(seqs[j])) for j in missing])
            attn = torch.tensor([[1] * len(seqs[j]) + [0] * (t - len(seqs[j])) for j in missing])
            feats = target_features(target, tokens, layer_ids, attn)
            for row, j in enumerate(missing):
                tmp = self._path(seqs[j]) + ".tmp"
                torch.save(feats[row, : len(seqs[j])].to(self.dtype).clone(), tmp)
                os.replace(tmp, self._path(seqs[j]))  # a killed run leaves no half-written entry
        rows = [torch.load(self._path(x), weights_only=True).float() for x in seqs]
        t_max = max(len(s) for s in seqs)
        out = torch.zeros(len(rows), t_max, rows[0].shape[-1])
        for j, r in enumerate(rows):
            out[j, : r.shape[0]] = r
        return out


def _load_initial_weights(drafter: DFlashDrafter, path: str) -> None:
    """`--init-from`: the checkpoint's weights (read by `DFlashDrafter.from_pretrained`, which
    refuses an incomplete one) into this run's drafter, once their shapes agree."""
    src = DFlashDrafter.from_pretrained(path)
    for f in ("hidden_size", "num_hidden_layers", "target_layer_ids", "block_size", "mask_token_id", "vocab_size"):
        if getattr(drafter.cfg, f) != getattr(src.cfg, f):
            raise DFlashConfigError(f"--init-from {path}: its {f} is {getattr(src.cfg, f)}, this run's is "
                                    f"{getattr(drafter.cfg, f)}; pass matching recipe flags or drop --init-from")
    drafter.load_state_dict(src.state_dict())


def initial_record(path: str) -> dict:
    """What a run started from (`--init-from`): the checkpoint's path and, when it has one, its own
    training record, so a chain of runs keeps its whole history (steps, data, tau curve)."""
    rec = {"path": os.path.abspath(path)}
    prev = os.path.join(path, "training_record.json")
    if os.path.exists(prev):
        with open(prev) as f:
            rec["record"] = json.load(f)
    return rec


def _device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return device


def load_examples(path: str) -> list[dict]:
    """jsonl examples (``.jsonl.xz`` too)."""
    from ..prompts import open_text

    with open_text(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def train(target_path: str, data_path: str, out: str, recipe: Recipe, mask_token_id: int | None = None,
          max_steps: int | None = None, progress: bool = True, threads: int = 0,
          feature_cache: str | None = None, feature_cache_dtype: str = "float32",
          eval_data: str | None = None, eval_every: int = 0, snapshot_every: int = 0,
          init_from: str | None = None, device: str = "cpu", time_budget_s: float = 0.0,
          save_dtype: str = "float32") -> dict:
    """Train and save a drafter in the published format; returns the training record.

    Target features are computed online from the frozen target, or, with `feature_cache` (a
    directory), computed once per example and read back from disk afterwards. With `eval_data`
    (held-out jsonl in the same format), `offline_tau` is recorded every `eval_every` steps;
    `snapshot_every` keeps a servable drafter every that many steps in `out/step-N`.
    `init_from`: start from a drafter checkpoint (same shape) instead of a fresh one: a longer
    run on top of a shorter one, with its own schedule. `device`: where the target and drafter run
    (token bookkeeping stays on the host); `time_budget_s`: see `TrainJob`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(recipe.seed)
    rng = random.Random(recipe.seed)
    if device.startswith("cuda"):
        from .hf_generate import torch_tf32

        torch_tf32(True)
    target = AutoModelForCausalLM.from_pretrained(target_path, dtype=torch.float32).to(device).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    if mask_token_id is None:
        tok = AutoTokenizer.from_pretrained(target_path)
        mask_token_id = tok.convert_tokens_to_ids("<|mask|>") if "<|mask|>" in tok.get_vocab() else tok.pad_token_id
    cfg = DrafterConfig.for_target(target.config, num_layers=recipe.num_draft_layers, block_size=recipe.block_size,
                                   mask_token_id=mask_token_id, target_layer_ids=recipe.target_layer_ids)
    drafter = DFlashDrafter(cfg, inject_every_layer=recipe.inject_every_layer)
    if init_from:
        _load_initial_weights(drafter, init_from)
    drafter.to(device)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    examples = load_examples(data_path)
    cache = FeatureCache(feature_cache, target_path, cfg.target_layer_ids, feature_cache_dtype) if feature_cache else None
    steps_per_epoch = math.ceil(len(examples) / recipe.batch_size)
    total = max_steps or max(1, int(steps_per_epoch * recipe.epochs))
    plan = {"total": total}  # a time budget may shorten it

    def lr_factor(s: int) -> float:
        return warmup_cosine(s, plan["total"], max(1, int(recipe.warmup_ratio * plan["total"])))

    opt = torch.optim.AdamW(drafter.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    weights = loss_weights(recipe.block_size, recipe.decay, recipe.loss_positions)
    state_path = os.path.join(out, "train_state.pt")
    step, losses, accs, taus = 0, [], [], []
    os.makedirs(out, exist_ok=True)
    held = None
    if eval_data and eval_every:
        ev = load_examples(eval_data)
        seqs_e = [e["prompt_ids"] + e["response_ids"] for e in ev]
        t_e = max(map(len, seqs_e))
        tok_e = torch.tensor([x + [0] * (t_e - len(x)) for x in seqs_e])
        att_e = torch.tensor([[1] * len(x) + [0] * (t_e - len(x)) for x in seqs_e])
        held = (target_features(target, tok_e.to(device), cfg.target_layer_ids, att_e.to(device)), tok_e, [len(x) for x in seqs_e],
                [len(e["prompt_ids"]) for e in ev])

    def evaluate_now():
        if held is not None:
            taus.append([step, offline_tau(drafter, embed, lm_head, held[0], held[1], held[2], held[3], recipe.block_size)])
            if bar is not None:
                bar.write(f"step {step}: offline tau {taus[-1][1]}")

    if os.path.exists(state_path):  # resume
        s = torch.load(state_path, weights_only=True)  # plain tensors and numbers: no pickled code runs
        drafter.load_state_dict(s["drafter"]), opt.load_state_dict(s["opt"]), sched.load_state_dict(s["sched"])
        step, losses, accs, rng_state = s["step"], s["losses"], s["accs"], s["rng"]
        plan["total"] = s.get("plan", plan)["total"]
        taus = s.get("taus", [])
        rng.setstate(rng_state)
        torch.set_rng_state(s["torch_rng"])
    order: list[int] = []
    t0 = time.time()
    # the time budget times steps timed_from .. timed_from + 15, after 5 steps of warm-up (allocator, kernels)
    timed_from, timed_at = step + 5, 0.0
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=plan["total"], initial=step, desc="drafter", dynamic_ncols=True)
    drafter.train()
    if not taus:
        evaluate_now()
    while step < plan["total"]:
        if time_budget_s and step == timed_from:
            timed_at = time.time()
        if time_budget_s and step == timed_from + 15:
            per_step = (time.time() - timed_at) / 15
            fit = step + int((time_budget_s - (time.time() - t0)) / per_step)
            if fit < plan["total"]:
                plan["total"] = max(step + 1, fit)
                if bar is not None:
                    bar.total = plan["total"]

        if not order:
            order = list(range(len(examples)))
            rng.shuffle(order)
        idx = [order.pop() for _ in range(min(recipe.batch_size, len(order)))]
        batch = [examples[i] for i in idx]
        seqs = [ex["prompt_ids"] + ex["response_ids"] for ex in batch]
        lens = [len(s) for s in seqs]
        t_max = max(lens)
        tokens = torch.tensor([s + [0] * (t_max - len(s)) for s in seqs])
        attn = torch.tensor([[1] * n + [0] * (t_max - n) for n in lens])
        if cache is not None:
            feats = cache.get(target, seqs, cfg.target_layer_ids).to(device)
        else:
            feats = target_features(target, tokens.to(device), cfg.target_layer_ids, attn.to(device))
        anchors = [pick_anchors(len(ex["prompt_ids"]), n, recipe.num_anchors, recipe.block_size, rng, recipe.random_anchors)
                   for ex, n in zip(batch, lens)]
        loss, acc = drafter_loss(drafter, embed, lm_head, feats, tokens, anchors, lens, weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), recipe.grad_clip)
        opt.step()
        sched.step()
        step += 1
        losses.append(round(loss.item(), 4))
        accs.append([round(x, 3) for x in acc.tolist()])
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", acc1=f"{acc[0].item():.2f}")
        if eval_every and step % eval_every == 0:
            evaluate_now()
        if snapshot_every and step % snapshot_every == 0:
            drafter.save_pretrained(os.path.join(out, f"step-{step}"), extra_config={"dflash_vllm_training": {"recipe": asdict(recipe), "steps": step}})
        if step % 100 == 0 or step == plan["total"]:
            torch.save({"drafter": drafter.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(), "step": step, "plan": plan,
                        "losses": losses, "accs": accs, "taus": taus, "rng": rng.getstate(), "torch_rng": torch.get_rng_state()}, state_path)
    if bar is not None:
        bar.close()
    import transformers

    record = {
        "recipe": asdict(recipe), "target": os.path.abspath(target_path), "data": os.path.abspath(data_path),
        "num_examples": len(examples), "steps": step, "device": _device_name(device),
        "time_budget_s": time_budget_s or None,
        "features": f"cached in {os.path.abspath(feature_cache)} ({feature_cache_dtype})" if feature_cache else "online", "seconds": round(time.time() - t0, 1),
        "final_loss_mean_last_50": round(sum(losses[-50:]) / max(1, len(losses[-50:])), 4),
        "position_accuracy_last_50": [round(sum(a[k] for a in accs[-50:]) / max(1, len(accs[-50:])), 3) for k in range(recipe.block_size - 1)],
        "loss_curve_every_20": losses[::20],
        "offline_tau_curve": taus,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    if init_from:
        record["init_from"] = initial_record(init_from)
    drafter.to("cpu", getattr(torch, save_dtype))
    drafter.save_pretrained(out, extra_config={"dflash_vllm_training": {"recipe": asdict(recipe), "steps": step}})
    with open(os.path.join(out, "training_record.json"), "w") as f:
        json.dump(record, f, indent=1)
    os.remove(state_path)
    return record


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dflash-vllm train", description="Train a DFlash drafter (paper recipe).")
    add_options(ap, TrainJob)
    add_options(ap.add_argument_group("recipe (saved beside the checkpoint)"), Recipe)
    args = ap.parse_args(argv)
    job, recipe = parse_into(TrainJob, args), parse_into(Recipe, args)
    record = train(job.target, job.data, job.out, recipe, job.mask_token_id, job.max_steps, threads=job.threads,
                   feature_cache=job.feature_cache, feature_cache_dtype=job.feature_cache_dtype,
                   eval_data=job.eval_data, eval_every=job.eval_every, snapshot_every=job.snapshot_every,
                   init_from=job.init_from, device=job.device, time_budget_s=job.time_budget_s,
                   save_dtype=job.save_dtype)
    print(json.dumps({k: v for k, v in record.items() if k != "loss_curve_every_20"}, indent=1))


if __name__ == "__main__":
    main()
