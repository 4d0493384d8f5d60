"""Write the model cards (README.md) of the demo pair from their training records and a measurement
JSON produced by `python deploy/demo/write_cards.py --measure` (vLLM, this machine)."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def measure() -> dict:
    from dflash_vllm.training.evaluate import evaluate

    t, d = os.path.join(HERE, "target"), os.path.join(HERE, "drafter")
    res = {"target": evaluate(t, None), "ours": evaluate(t, d, k=15),
           "ours_batch1": evaluate(t, d, k=15, max_num_seqs=1), "native_batch1": evaluate(t, d, k=15, max_num_seqs=1, native=True)}
    res["identical_outputs_vs_no_spec"] = sum(a == b for a, b in zip(res["ours"]["per_request_outputs"], res["target"]["per_request_outputs"]))
    ob, nb = res["ours_batch1"]["accepted_per_request"], res["native_batch1"]["accepted_per_request"]
    res["batch1_requests_with_identical_accepted_counts_vs_native"] = sum(a == b for a, b in zip(ob, nb))
    res["batch1_requests_with_identical_accepted_counts_vs_reference"] = sum(
        a == b for a, b in zip(ob, reference_accepted(t, d)))
    for r in res.values():
        if isinstance(r, dict):
            r.pop("per_request_outputs", None)
    with open(os.path.join(HERE, "measurements.json"), "w") as f:
        json.dump(res, f, indent=1)
    return res


def reference_accepted(target_dir: str, drafter_dir: str, n: int = 64) -> list[list[int]]:
    """Per-step accepted counts of the plain-PyTorch reference loop on the same held-out prompts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dflash_vllm.prompts import chat_ids
    from dflash_vllm.reference import generate
    from dflash_vllm.torch_drafter import DFlashDrafter
    from dflash_vllm.training.tasks import make_samples

    tok = AutoTokenizer.from_pretrained(target_dir)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(drafter_dir).eval()
    out = []
    for s in make_samples(n, seed=101):
        ids = chat_ids(tok, s.prompt)
        out.append(generate(target, drafter, ids, 160, num_speculative_tokens=15, stop_token_ids=(tok.eos_token_id,)).accepted)
    return out


def write(m: dict) -> None:
    t = json.load(open(os.path.join(HERE, "target", "training_record.json")))
    d = json.load(open(os.path.join(HERE, "drafter", "training_record.json")))
    tq = m["target"]
    with open(os.path.join(HERE, "target", "README.md"), "w") as f:
        f.write(f"""# dflash-vllm demo target

{t['what']}. Made by `deploy/demo/make_demo.sh` (step 1, `dflash_vllm/training/target.py`).

- data: {t['data']}
- tokenizer: {t['tokenizer']}
- size: {t['parameters']:,} parameters, shape {t['shape']}
- training: {t['steps']} steps x {t['batch_size']} x {t['seq_len']} tokens ({t['tokens_seen']:,} tokens), {t['minutes']} min on 2 CPU cores; final loss (mean of last 100 steps) {t['final_loss_mean_last_100']}
- loss every 100 steps: {t['loss_curve_every_100']}

Greedy outputs on {tq['num_prompts']} held-out task prompts (seed 101), through vLLM on this machine:
task accuracy {tq['task_accuracy']:.1%} (arithmetic is where it errs), loop fraction {tq['loop_fraction']:.1%},
distinct-4-gram ratio {tq['distinct_4gram_ratio']}, {tq['finished_with_eos']:.0%} end with `<|end|>`, mean {tq['mean_output_tokens']:.1f} output tokens.
""")
    o, ob, nb = m["ours"], m["ours_batch1"], m["native_batch1"]
    with open(os.path.join(HERE, "drafter", "README.md"), "w") as f:
        f.write(f"""# dflash-vllm demo drafter (DFlash, block 16)

A DFlash drafter for `../target`, in the published format (`architectures: ["DFlashDraftModel"]`).
Made by `deploy/demo/make_demo.sh` (steps 2-3): the target regenerated answers to 6,000 task prompts
(seed 2) through vLLM; `dflash-vllm train` with the paper's recipe.

- recipe: {json.dumps(d['recipe'])}
- data: {d['num_examples']} target-generated sequences; {d['steps']} steps in {d['seconds'] / 60:.1f} min on 2 CPU cores
- final loss (mean of last 50 steps) {d['final_loss_mean_last_50']}; training accuracy per block position 1..15: {d['position_accuracy_last_50']}

Measured through vLLM with this add-on, greedy, K = 15, on {o['num_prompts']} held-out prompts (seed 101):
- tau (mean acceptance length) **{o['tau']}** at batch 32; {ob['tau']} at batch 1 (vLLM's native DFlash at batch 1: {nb['tau']})
- accepted-drafts histogram (0..15 per step): {o['accept_histogram']}
- outputs identical to no speculation: {m['identical_outputs_vs_no_spec']}/{o['num_prompts']}
- batch 1, per-step accepted counts identical to our plain-PyTorch reference loop (`dflash_vllm/reference.py`):
  {m['batch1_requests_with_identical_accepted_counts_vs_reference']}/{o['num_prompts']} requests; to vLLM's native DFlash: {m['batch1_requests_with_identical_accepted_counts_vs_native']}/{o['num_prompts']}
  (where native differs, ours matches the reference: native's CPU drafting path deviates numerically)
""")


if __name__ == "__main__":
    path = os.path.join(HERE, "measurements.json")
    write(measure() if "--measure" in sys.argv or not os.path.exists(path) else json.load(open(path)))
