"""Make the demo target: a small Qwen3-architecture model with its own BPE tokenizer and chat
template, trained on the templated task suite (`tasks.py`). Resumable; deterministic under a seed.

    dflash-vllm make-target --out deploy/demo/target --minutes 60
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass

import torch

from ..options import add_options, opt, parse_into
from .tasks import CHAT_TEMPLATE, END, SPECIAL_TOKENS, chat_text, make_samples
from .trainer import warmup_cosine

MODEL_SHAPE = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=64)


def build_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=END, pad_token="<|pad|>",
                                   additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in (END, "<|pad|>")])
    fast.chat_template = CHAT_TEMPLATE
    return fast


@dataclass
class TargetRecipe:
    """`dflash-vllm make-target`: every field is an option."""

    out: str = opt(help="output directory (a rerun resumes from OUT/train_state.pt)", required=True)
    minutes: float = opt(60.0, "training time budget")
    seed: int = opt(0, "task samples and initialisation")
    num_samples: int = opt(120_000, "task samples generated for training")
    vocab_size: int = opt(1024, "BPE vocabulary size")
    seq_len: int = opt(256, "tokens per training row")
    batch_size: int = opt(16, "rows per step")
    lr: float = opt(1.5e-3, "peak learning rate (AdamW)")
    threads: int = opt(0, "torch threads (0: all)")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dflash-vllm make-target", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(ap, TargetRecipe)
    args = parse_into(TargetRecipe, ap.parse_args(argv))
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import Qwen3Config, Qwen3ForCausalLM

    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(args.seed)
    samples = make_samples(args.num_samples, seed=args.seed)
    texts = [chat_text(s) for s in samples]
    tok = build_tokenizer(texts[:20_000], args.vocab_size)
    ids = [t for text in texts for t in tok(text)["input_ids"]]
    data = torch.tensor(ids[: len(ids) // args.seq_len * args.seq_len]).view(-1, args.seq_len)
    cfg = Qwen3Config(vocab_size=len(tok), max_position_embeddings=2048, tie_word_embeddings=False,
                      rope_theta=10000.0, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, torch_dtype="float32", **MODEL_SHAPE)
    model = Qwen3ForCausalLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    ckpt = os.path.join(args.out, "train_state.pt")
    state = {"step": 0, "losses": [], "total_steps": None, "elapsed": 0.0}
    if os.path.exists(ckpt):
        saved = torch.load(ckpt, weights_only=True)  # plain tensors and numbers: no pickled code runs
        model.load_state_dict(saved["model"]), opt.load_state_dict(saved["opt"])
        state = saved["state"]
    g = torch.Generator().manual_seed(args.seed + state["step"])
    model.train()
    t0 = time.time() - state["elapsed"]
    while state["total_steps"] is None or state["step"] < state["total_steps"]:
        step = state["step"]
        if state["total_steps"] is None and step == 10:  # size the cosine schedule to the budget
            per_step = (time.time() - t0) / 10
            state["total_steps"] = max(20, int(args.minutes * 60 / per_step))
        total = state["total_steps"] or 10_000
        warm = max(1, int(0.03 * total))
        lr = args.lr * warmup_cosine(step, total, warm)
        for group in opt.param_groups:
            group["lr"] = lr
        batch = data[torch.randint(0, data.shape[0], (args.batch_size,), generator=g)]
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["step"] += 1
        state["losses"].append(round(loss.item(), 4))
        if state["step"] % 50 == 0:
            state["elapsed"] = time.time() - t0
            print(f"step {state['step']}/{total} loss {sum(state['losses'][-50:]) / 50:.4f} lr {lr:.2e} "
                  f"{state['elapsed'] / 60:.1f} min", flush=True)
        if state["step"] % 500 == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state}, ckpt)
    model.eval()
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    card = {
        "what": "dflash-vllm demo target: Qwen3 architecture trained from scratch on the templated task suite",
        "data": f"{args.num_samples} samples of dflash_vllm.training.tasks (families arith, sort, convert, record, code), seed {args.seed}",
        "tokenizer": f"byte-level BPE, {len(tok)} tokens, chat template <|user|>/<|assistant|>/<|end|>",
        "parameters": n_params,
        "shape": MODEL_SHAPE,
        "steps": state["step"], "batch_size": args.batch_size, "seq_len": args.seq_len,
        "tokens_seen": state["step"] * args.batch_size * args.seq_len,
        "minutes": round((time.time() - t0) / 60, 1),
        "final_loss_mean_last_100": round(sum(state["losses"][-100:]) / max(1, len(state["losses"][-100:])), 4),
        "loss_curve_every_100": state["losses"][::100],
        "versions": {"torch": torch.__version__},
    }
    with open(os.path.join(args.out, "training_record.json"), "w") as f:
        json.dump(card, f, indent=1)
    os.remove(ckpt) if os.path.exists(ckpt) else None
    print(json.dumps({k: v for k, v in card.items() if k != "loss_curve_every_100"}, indent=1))


if __name__ == "__main__":
    main()
