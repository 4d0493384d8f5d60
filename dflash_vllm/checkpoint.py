"""What a drafter checkpoint directory is, and which ones we can load.

Two on-disk formats are read (``config.DrafterConfig.from_dict`` dispatches here):

- the published DFlash format (z-lab checkpoints, and what ``DFlashDrafter.save_pretrained``
  writes): ``architectures: ["DFlashDraftModel"]``, a Qwen3/LLaMA-shaped body at the top level
  and ``dflash_config: {target_layer_ids, mask_token_id}``. Ours add a ``dflash_vllm`` block
  saying which variant was trained and by which code (``provenance_block``); checkpoints
  without it are the every-layer variant, the only one that was ever published;
- the format of PyPI ``speculators`` (``speculators train --speculator-type dflash``, 0.9.0):
  a ``speculators_config`` block, the body in ``transformer_layer_config``, target layers as
  ``aux_hidden_state_layer_ids`` (vLLM's aux-layer numbering, ours + 1), and tensors named like
  ours (no embedding, no LM head for a full draft vocabulary). ``speculators_to_published``
  turns its config.json into the published one; what we cannot serve is refused in one line.

Tensor names of both formats map onto our parameter names through ``drafter_tensor_name``,
used by the pre-flight weight check, the PyTorch loader and the vLLM drafter's
``load_weights`` alike.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from .config import DEFAULT_ROPE_THETA, DFlashConfigError

# -- variants ----------------------------------------------------------------------------------
VARIANT_EVERY_LAYER = "kv_injection_every_layer"  # the paper's and the published checkpoints'
VARIANT_INPUT_FUSION = "input_fusion_only"  # the ablation: target K/V in the first layer only
VARIANTS = (VARIANT_EVERY_LAYER, VARIANT_INPUT_FUSION)
SERVABLE_VARIANTS = (VARIANT_EVERY_LAYER,)  # what models/drafter.py (and vLLM's native DFlash) compute
# The ablation is not the published architecture: saved under its own name, so that vLLM's native
# DFlash and the `dflash` package refuse it too instead of serving it as if every layer saw the target.
INPUT_FUSION_ARCHITECTURE = "DFlashInputFusionDraftModel"
FORMAT_VERSION = 1


def variant_name(inject_every_layer: bool) -> str:
    return VARIANT_EVERY_LAYER if inject_every_layer else VARIANT_INPUT_FUSION


def variant_of(cfg: dict[str, Any], where: str) -> str:
    """The variant a published-format config.json describes (old ones have no block: every layer,
    unless our own training recipe recorded the ablation)."""
    block = cfg.get("dflash_vllm")
    if isinstance(block, dict) and block.get("variant") is not None:
        variant = block["variant"]
        if variant not in VARIANTS:
            raise DFlashConfigError(
                f"{where}: dflash_vllm.variant {variant!r} is unknown to this dflash-vllm (it knows {list(VARIANTS)}); "
                "upgrade dflash-vllm to the version that wrote this checkpoint"
            )
    else:
        recipe = (cfg.get("dflash_vllm_training") or {}).get("recipe") or {}
        variant = variant_name(recipe.get("inject_every_layer", True) is not False)
    if INPUT_FUSION_ARCHITECTURE in (cfg.get("architectures") or []):
        variant = VARIANT_INPUT_FUSION
    return variant


def refuse_unservable_variant(variant: str, where: str) -> None:
    if variant not in SERVABLE_VARIANTS:
        raise DFlashConfigError(
            f"{where}: variant {variant!r} (target K/V injected into the first drafter layer only, an ablation) "
            "cannot be served: the vLLM drafter injects target K/V into every layer; retrain with "
            "inject_every_layer=True (the default recipe)"
        )


# -- provenance ------------------------------------------------------------------------------------
def training_commit() -> tuple[str | None, bool | None]:
    """(``git rev-parse HEAD``, uncommitted changes under the package?) of the repository this
    package runs from; (None, None) when it is not a git checkout (an installed wheel) or git
    is missing. Only a repository whose top level holds this package counts, so a wheel
    installed into a virtualenv inside some other work tree does not borrow that tree's commit.
    Checkpoints record it as their training commit, bench results as the code that ran."""
    pkg = os.path.dirname(os.path.abspath(__file__))
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", pkg, *args], capture_output=True, text=True, timeout=10,
                                  check=True).stdout.strip()

        top = git("rev-parse", "--show-toplevel")
        if os.path.realpath(os.path.dirname(pkg)) != os.path.realpath(top):
            return None, None
        sha = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", pkg))
        return sha or None, dirty
    except (OSError, subprocess.SubprocessError):
        return None, None


def provenance_block(variant: str) -> dict[str, Any]:
    """The ``dflash_vllm`` block of a config.json we write."""
    from . import __version__

    sha, dirty = training_commit()
    return {
        "format_version": FORMAT_VERSION,
        "variant": variant,
        "dflash_vllm_version": __version__,
        "training_commit": sha,
        "training_commit_dirty": dirty,
    }


# -- rope ----------------------------------------------------------------------------------------------
def rope_of(cfg: Any) -> tuple[float | None, dict[str, Any] | None]:
    """(rope_theta, rope scaling or None) of an HF config, a dict or a PretrainedConfig, in
    either spelling: transformers 4 (``rope_theta`` + ``rope_scaling``) or transformers 5
    (``rope_parameters`` holding both). The scaling dict has ``rope_type`` and its own keys,
    never ``rope_theta``; the default rope is None."""
    get = cfg.get if isinstance(cfg, dict) else (lambda k, d=None: getattr(cfg, k, d))
    params = get("rope_parameters") or {}
    scaling = get("rope_scaling") or {}
    theta = get("rope_theta")
    if isinstance(params, dict):
        if theta is None:
            theta = params.get("rope_theta")
        if not scaling:
            scaling = params
    scaling = {k: v for k, v in dict(scaling).items() if k != "rope_theta"}
    if "type" in scaling:  # transformers < 4.45 spelling
        scaling.setdefault("rope_type", scaling.pop("type"))
    if scaling.get("rope_type", "default") == "default" and set(scaling) <= {"rope_type"}:
        scaling = {}
    return (None if theta is None else float(theta)), (scaling or None)


def refuse_unservable_rope(scaling: dict[str, Any] | None, where: str) -> None:
    if not scaling:
        return
    if any(isinstance(v, dict) for v in scaling.values()):
        raise DFlashConfigError(f"{where}: per-layer-type rope parameters {sorted(scaling)} cannot be served; "
                                "the drafter uses one rope for every layer")
    factor = scaling.get("partial_rotary_factor", 1.0)
    if factor is not None and float(factor) != 1.0:
        raise DFlashConfigError(f"{where}: partial_rotary_factor {factor} cannot be served; the drafter rotates "
                                "the whole head (retrain with partial_rotary_factor 1.0)")


def refuse_unservable_attention(body: dict[str, Any], dflash: dict[str, Any], where: str) -> None:
    """Sliding-window or causal drafter layers: ours attend to all context and bidirectionally in
    the block, in every layer."""
    layer_types = body.get("layer_types") or []
    sliding = [i for i, t in enumerate(layer_types) if t == "sliding_attention"]
    if not layer_types and body.get("use_sliding_window") and body.get("sliding_window"):
        sliding = list(range(int(body.get("num_hidden_layers", 1))))
    if sliding or dflash.get("use_swa"):
        raise DFlashConfigError(
            f"{where}: drafter layers {sliding or 'all'} use sliding-window attention, which the dflash-vllm drafter "
            "cannot serve; serve it with vLLM's native DFlash (DFLASH_VLLM_NATIVE=1) or retrain with full attention"
        )
    if body.get("is_causal") or dflash.get("causal"):
        raise DFlashConfigError(
            f"{where}: this drafter was trained with causal attention inside the block, the dflash-vllm drafter "
            "attends bidirectionally; serve it with vLLM's native DFlash (DFLASH_VLLM_NATIVE=1)"
        )


# -- speculators -----------------------------------------------------------------------------------
def is_speculators_config(cfg: dict[str, Any]) -> bool:
    return "speculators_config" in cfg or "speculators_model_type" in cfg


def speculators_to_published(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """A speculators-format config.json (speculators 0.9.0, ``speculators_model_type: dflash``)
    as the published DFlash config.json, or DFlashConfigError naming what we cannot serve.

    Mapping (the same vLLM 0.32 applies, vllm/transformers_utils/configs/speculators/algos.py
    ``update_dflash``): the body is ``transformer_layer_config``; ``target_layer_ids`` are
    ``aux_hidden_state_layer_ids`` minus one (speculators counts the embedding output as 0);
    ``block_size`` and ``mask_token_id`` are top-level keys."""
    kind = cfg.get("speculators_model_type")
    if kind != "dflash":
        raise DFlashConfigError(
            f"{where}: speculators_model_type is {kind!r}; dflash-vllm serves speculators 'dflash' checkpoints only "
            "(for others use vLLM's own support: DFLASH_VLLM_NATIVE=1)"
        )
    body = cfg.get("transformer_layer_config")
    if not isinstance(body, dict):
        raise DFlashConfigError(f"{where}: speculators config has no transformer_layer_config object; "
                                "re-save the checkpoint with speculators")
    vocab = body.get("vocab_size")
    draft_vocab = cfg.get("draft_vocab_size")
    if draft_vocab is not None and vocab is not None and int(draft_vocab) != int(vocab):
        raise DFlashConfigError(
            f"{where}: draft_vocab_size {draft_vocab} != vocab_size {vocab} (a reduced draft vocabulary with its own "
            "lm_head and d2t/t2d maps), which the dflash-vllm drafter cannot serve: it drafts with the target's LM head; "
            "serve it with vLLM's native DFlash (DFLASH_VLLM_NATIVE=1) or retrain with --draft-vocab-size equal to "
            "the target's vocab size"
        )
    if cfg.get("sample_from_anchor"):
        raise DFlashConfigError(
            f"{where}: sample_from_anchor is true (the anchor slot drafts too), which the dflash-vllm drafter cannot "
            "serve; retrain with sample_from_anchor false (speculators' default for dflash)"
        )
    hidden = body.get("hidden_size")
    target_hidden = cfg.get("target_hidden_size")
    if target_hidden is not None and hidden is not None and int(target_hidden) != int(hidden):
        raise DFlashConfigError(
            f"{where}: target_hidden_size {target_hidden} != hidden_size {hidden}, which the dflash-vllm drafter "
            "cannot serve (its fc takes target features of its own width); use a drafter as wide as the target"
        )
    act = body.get("hidden_act", "silu")
    if act != "silu":
        raise DFlashConfigError(f"{where}: transformer_layer_config.hidden_act is {act!r}; the dflash-vllm drafter "
                                "serves 'silu' MLPs only")
    refuse_unservable_attention(body, {}, where)
    aux = cfg.get("aux_hidden_state_layer_ids")
    if not aux:
        raise DFlashConfigError(f"{where}: aux_hidden_state_layer_ids is missing; add the target layer ids the "
                                "drafter was trained on (speculators numbering: embedding output = 0)")
    if min(int(i) for i in aux) < 1:
        raise DFlashConfigError(
            f"{where}: aux_hidden_state_layer_ids {list(aux)} includes 0 (the target's embedding output), which the "
            "dflash-vllm drafter cannot take as a feature; use a drafter trained on decoder-layer outputs"
        )
    if cfg.get("mask_token_id") is None:
        raise DFlashConfigError(f"{where}: mask_token_id is missing; add the mask token id the drafter was trained "
                                "with (speculators train --mask-token-id)")
    theta, scaling = rope_of(body)
    out = {k: v for k, v in body.items() if k not in ("rope_parameters", "rope_scaling", "architectures")}
    out.update(
        architectures=["DFlashDraftModel"],
        # speculators builds Qwen3DFlashDecoderLayer (q/k norms, silu MLP) whatever the verifier's
        # model_type, which is what ours is too
        model_type="qwen3",
        rope_theta=theta if theta is not None else DEFAULT_ROPE_THETA,
        block_size=int(cfg.get("block_size", 8)),  # speculators' default
        dflash_config={"target_layer_ids": [int(i) - 1 for i in aux], "mask_token_id": int(cfg["mask_token_id"])},
        dflash_vllm={"variant": VARIANT_EVERY_LAYER, "converted_from": "speculators "
                     + str(cfg.get("speculators_version", "?"))},
    )
    if scaling:
        out["rope_scaling"] = scaling
    return out


# -- tensor names ------------------------------------------------------------------------------------
# Tensors a checkpoint may carry that the drafter does not own: the target's embedding and LM head
# (DFlash shares them), speculators' training-time copies of the verifier's head and final norm,
# and its vocabulary maps (only ever written for a reduced draft vocabulary, which is refused
# before loading; identity no-ops otherwise, as speculators itself treats them).
TARGET_OWNED = ("embed_tokens", "lm_head", "verifier_lm_head", "verifier_norm", "t2d", "d2t")


def drafter_tensor_name(name: str) -> str | None:
    """Our parameter name for a checkpoint tensor name (published or speculators format), or
    None for a tensor the drafter does not own."""
    name = name.removeprefix("model.")
    if name.split(".", 1)[0] in TARGET_OWNED:
        return None
    return name


def read_drafter_state_dict(path: str) -> dict[str, Any]:
    """Every drafter tensor in ``path``'s safetensors files, under our parameter names."""
    from safetensors.torch import load_file

    state = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".safetensors"):
            for key, tensor in load_file(os.path.join(path, name)).items():
                ours = drafter_tensor_name(key)
                if ours is not None:
                    state[ours] = tensor
    return state
