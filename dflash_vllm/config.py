"""The on-disk DFlash drafter format and the checks that run before an engine starts.

The format is the published one (z-lab checkpoints): ``config.json`` with
``architectures: ["DFlashDraftModel"]``, a Qwen3/LLaMA-shaped body, ``block_size``,
``num_target_layers`` and ``dflash_config: {target_layer_ids, mask_token_id}``; weights in
``model.safetensors`` named ``layers.N.self_attn.{q,k,v,o}_proj``, ``fc``, ``hidden_norm``,
``norm``. No embedding and no LM head: both are the target's. Ours add a ``dflash_vllm`` block
(variant, provenance) and carry the target's ``rope_scaling``; speculators-format checkpoints
are read too. What a checkpoint directory may be, and what is refused: ``checkpoint.py``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

DRAFTER_ARCHITECTURES = ("DFlashDraftModel",)
SUPPORTED_MODEL_TYPES = ("qwen3", "llama")
DEFAULT_ROPE_THETA = 1_000_000.0  # Qwen3's; what a config without rope_theta gets


class DFlashConfigError(ValueError):
    """A drafter/target pairing that cannot work. The message is one line naming the fix."""


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """Spread uniformly from layer 1 to L-3, as the published checkpoints do."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    if end - start < num_draft_layers - 1:  # shallow targets: spread over every layer instead
        start, end = 0, num_target_layers - 1
    span = end - start
    return [round(start + i * span / (num_draft_layers - 1)) for i in range(num_draft_layers)]


@dataclass
class DrafterConfig:
    """Everything the drafter needs, read from its ``config.json``."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = DEFAULT_ROPE_THETA
    max_position_embeddings: int = 40960
    block_size: int = 16
    num_target_layers: int = 0
    target_layer_ids: list[int] = field(default_factory=list)
    mask_token_id: int = 0
    model_type: str = "qwen3"
    attention_bias: bool = False
    # The target's rope scaling (``rope_type`` and its keys, no ``rope_theta``); None = plain rope.
    rope_scaling: dict[str, Any] | None = None
    # checkpoint.VARIANTS: what the layers attend to (only the every-layer one can be served).
    variant: str = "kv_injection_every_layer"
    # Where it came from; not part of the architecture.
    source_format: str = "dflash"  # "dflash" (published) or "speculators"
    path: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def rope_parameters(self) -> dict[str, Any]:
        """vLLM's ``get_rope(rope_parameters=...)`` / transformers 5's ``rope_parameters``."""
        return {"rope_type": "default", **(self.rope_scaling or {}), "rope_theta": self.rope_theta}

    @property
    def inject_every_layer(self) -> bool:
        from .checkpoint import VARIANT_EVERY_LAYER

        return self.variant == VARIANT_EVERY_LAYER

    @classmethod
    def from_dict(cls, cfg: dict[str, Any], path: str | None = None, *, serving: bool = True) -> "DrafterConfig":
        """``serving=True`` (every serving path) refuses, in one line, a checkpoint the vLLM
        drafter would compute wrong; training and evaluation read any variant with False."""
        from . import checkpoint as ckpt

        where = f"drafter config {path}/config.json" if path else "drafter config"
        source_format = "dflash"
        if ckpt.is_speculators_config(cfg):
            cfg = ckpt.speculators_to_published(cfg, where)
            source_format = "speculators"
        archs = cfg.get("architectures") or []
        if not any(a in DRAFTER_ARCHITECTURES + (ckpt.INPUT_FUSION_ARCHITECTURE,) for a in archs):
            raise DFlashConfigError(
                f"{where}: architectures is {archs}, expected ['DFlashDraftModel']; "
                "point the speculative config's 'model' at a DFlash drafter directory"
            )
        model_type = cfg.get("model_type", "qwen3")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise DFlashConfigError(
                f"{where}: model_type {model_type!r} is not supported; use one of "
                f"{list(SUPPORTED_MODEL_TYPES)}"
            )
        missing = [
            k
            for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
            if k not in cfg
        ]
        if missing:
            raise DFlashConfigError(f"{where}: missing keys {missing}; re-export the drafter with them")
        dcfg = cfg.get("dflash_config") or {}
        n_layers = int(cfg["num_hidden_layers"])
        num_target_layers = int(cfg.get("num_target_layers", 0))
        layer_ids = dcfg.get("target_layer_ids", cfg.get("target_layer_ids"))
        if layer_ids is None:
            if not num_target_layers:
                raise DFlashConfigError(
                    f"{where}: neither dflash_config.target_layer_ids nor num_target_layers is set; "
                    "add dflash_config.target_layer_ids"
                )
            layer_ids = default_target_layer_ids(num_target_layers, n_layers)
        mask_token_id = dcfg.get("mask_token_id", cfg.get("mask_token_id"))
        if mask_token_id is None:
            raise DFlashConfigError(f"{where}: dflash_config.mask_token_id is missing; add it")
        variant = ckpt.variant_of(cfg, where)
        rope_theta, rope_scaling = ckpt.rope_of(cfg)
        if serving:
            ckpt.refuse_unservable_variant(variant, where)
            ckpt.refuse_unservable_rope(rope_scaling, where)
            ckpt.refuse_unservable_attention(cfg, dcfg, where)
        n_heads = int(cfg["num_attention_heads"])
        return cls(
            hidden_size=int(cfg["hidden_size"]),
            num_hidden_layers=n_layers,
            num_attention_heads=n_heads,
            num_key_value_heads=int(cfg.get("num_key_value_heads", n_heads)),
            head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // n_heads),
            intermediate_size=int(cfg["intermediate_size"]),
            vocab_size=int(cfg["vocab_size"]),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=DEFAULT_ROPE_THETA if rope_theta is None else rope_theta,
            max_position_embeddings=int(cfg.get("max_position_embeddings", 40960)),
            block_size=int(dcfg.get("block_size", cfg.get("block_size", 16))),
            num_target_layers=num_target_layers,
            target_layer_ids=[int(i) for i in layer_ids],
            mask_token_id=int(mask_token_id),
            model_type=model_type,
            attention_bias=bool(cfg.get("attention_bias", False)),
            rope_scaling=rope_scaling,
            variant=variant,
            source_format=source_format,
            path=path,
            raw=dict(cfg),
        )

    @classmethod
    def for_target(cls, target_cfg, *, num_layers: int, block_size: int, mask_token_id: int,
                   target_layer_ids: list[int] | None = None) -> "DrafterConfig":
        """A new drafter's config for a target (an HF config object or its config.json dict): the
        target's width, heads, vocabulary, norm epsilon and rope (theta and scaling); target layers
        spread by `default_target_layer_ids` unless given. The trainer and the test models use it."""
        from .checkpoint import rope_of

        get = target_cfg.get if isinstance(target_cfg, dict) else (lambda k, d=None: getattr(target_cfg, k, d))
        n_target = int(get("num_hidden_layers"))
        theta, scaling = rope_of(target_cfg)
        model_type = get("model_type", "qwen3")
        return cls(
            hidden_size=int(get("hidden_size")), num_hidden_layers=num_layers,
            num_attention_heads=int(get("num_attention_heads")), num_key_value_heads=int(get("num_key_value_heads")),
            head_dim=int(get("head_dim", None) or get("hidden_size") // get("num_attention_heads")),
            intermediate_size=int(get("intermediate_size")), vocab_size=int(get("vocab_size")),
            rms_norm_eps=float(get("rms_norm_eps", 1e-6)),
            rope_theta=DEFAULT_ROPE_THETA if theta is None else theta, rope_scaling=scaling,
            max_position_embeddings=int(get("max_position_embeddings", 4096)), block_size=block_size,
            num_target_layers=n_target,
            target_layer_ids=list(target_layer_ids or default_target_layer_ids(n_target, num_layers)),
            mask_token_id=mask_token_id, model_type=model_type if model_type in SUPPORTED_MODEL_TYPES else "qwen3",
        )

    @classmethod
    def from_pretrained(cls, path: str, *, serving: bool = True) -> "DrafterConfig":
        path = resolve_drafter_path(path)
        cfg_path = os.path.join(path, "config.json")
        if not os.path.isfile(cfg_path):
            raise DFlashConfigError(f"drafter directory {path!r} has no config.json; it is not a DFlash drafter")
        try:
            with open(cfg_path) as f:
                cfg = json.load(f)
        except json.JSONDecodeError as e:
            raise DFlashConfigError(f"{cfg_path} is not valid JSON ({e.msg} at line {e.lineno}); fix or re-export it") from None
        if not any(n.endswith(".safetensors") or n.endswith(".bin") for n in os.listdir(path)):
            raise DFlashConfigError(f"drafter directory {path!r} has no weights (*.safetensors); copy the weights there")
        return cls.from_dict(cfg, path=path, serving=serving)

    def to_hf_dict(self) -> dict[str, Any]:
        """A config.json in the published format, loadable by vLLM's native DFlash and `dflash`
        (the input-fusion ablation under its own architecture name, so that they refuse it)."""
        from .checkpoint import INPUT_FUSION_ARCHITECTURE

        out = {k: v for k, v in self.raw.items()}
        out.update(
            architectures=["DFlashDraftModel" if self.inject_every_layer else INPUT_FUSION_ARCHITECTURE],
            model_type=self.model_type,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            intermediate_size=self.intermediate_size,
            vocab_size=self.vocab_size,
            rms_norm_eps=self.rms_norm_eps,
            rope_theta=self.rope_theta,
            max_position_embeddings=self.max_position_embeddings,
            hidden_act="silu",
            attention_bias=self.attention_bias,
            attention_dropout=0.0,
            tie_word_embeddings=False,
            block_size=self.block_size,
            num_target_layers=self.num_target_layers,
            dflash_config={
                **(self.raw.get("dflash_config") or {}),
                "target_layer_ids": list(self.target_layer_ids),
                "mask_token_id": self.mask_token_id,
            },
        )
        out.pop("rope_parameters", None)
        out.pop("rope_scaling", None)
        if self.rope_scaling:
            out["rope_scaling"] = dict(self.rope_scaling)
        out["dflash_vllm"] = {**(self.raw.get("dflash_vllm") or {}), "variant": self.variant}
        return out


def resolve_drafter_path(path: str) -> str:
    """A local directory as is; a Hugging Face repo id (org/name) through the local HF cache or hub."""
    if os.path.isdir(path):
        return path
    looks_like_repo = path.count("/") == 1 and not path.startswith((".", "/", "~"))
    if looks_like_repo:
        try:
            from huggingface_hub import snapshot_download

            return snapshot_download(path, allow_patterns=["*.json", "*.safetensors", "*.pt"])
        except Exception:  # offline, private, or no such repo: fall through to the one-line error
            pass
    raise DFlashConfigError(
        f"drafter directory {path!r} does not exist; set the speculative config's 'model' to a DFlash "
        "drafter directory (config.json + model.safetensors) or a reachable Hugging Face repo id"
    )


# Target architectures whose vLLM implementation can hand out intermediate hidden states
# (they implement SupportsEagle3.set_aux_hidden_state_layers).
def target_exposes_hidden_states(architectures: list[str]) -> bool:
    try:
        from vllm.model_executor.models import ModelRegistry
        from vllm.model_executor.models.interfaces import supports_eagle3

        for arch in architectures:
            cls = ModelRegistry._try_load_model_cls(arch)  # noqa: SLF001 - registry has no public getter
            if cls is not None and supports_eagle3(cls):
                return True
        return False
    except Exception:  # vLLM absent (training machine): do not block on this check
        return True


def validate_pair(
    drafter: DrafterConfig,
    *,
    target_num_layers: int,
    target_hidden_size: int,
    target_vocab_size: int,
    num_speculative_tokens: int | None,
    target_architectures: list[str] | None = None,
) -> None:
    """Raise DFlashConfigError (one line, naming the fix) for a pairing that cannot work."""
    from .checkpoint import refuse_unservable_variant

    refuse_unservable_variant(drafter.variant, f"drafter {drafter.path}" if drafter.path else "drafter")
    if drafter.vocab_size != target_vocab_size:
        raise DFlashConfigError(
            f"drafter vocab_size {drafter.vocab_size} != target vocab_size {target_vocab_size}; "
            "the drafter shares the target's embedding and LM head, so use a drafter trained for this target"
        )
    if drafter.hidden_size != target_hidden_size:
        raise DFlashConfigError(
            f"drafter hidden_size {drafter.hidden_size} != target hidden_size {target_hidden_size}; "
            "use a drafter trained for this target"
        )
    bad = [i for i in drafter.target_layer_ids if not 0 <= i < target_num_layers]
    if bad:
        raise DFlashConfigError(
            f"dflash_config.target_layer_ids {drafter.target_layer_ids} has {bad} outside the target's "
            f"layers 0..{target_num_layers - 1}; use a drafter trained for this target"
        )
    if not 0 <= drafter.mask_token_id < target_vocab_size:
        raise DFlashConfigError(
            f"dflash_config.mask_token_id {drafter.mask_token_id} is outside the vocab [0, {target_vocab_size}); "
            "fix mask_token_id in the drafter's config.json"
        )
    if num_speculative_tokens is not None and not 1 <= num_speculative_tokens <= drafter.block_size - 1:
        raise DFlashConfigError(
            f"num_speculative_tokens={num_speculative_tokens} but this drafter was trained with block_size "
            f"{drafter.block_size}; set num_speculative_tokens between 1 and {drafter.block_size - 1}"
        )
    if target_architectures is not None and not target_exposes_hidden_states(target_architectures):
        raise DFlashConfigError(
            f"target architecture {target_architectures} cannot expose intermediate hidden states in vLLM "
            "(it does not implement SupportsEagle3); DFlash needs a Qwen3/LLaMA-style target"
        )


_WEIGHTS_CHECKED: set = set()  # signatures of drafter directories whose weights passed


def check_drafter_weights(drafter: DrafterConfig) -> None:
    """Open every weights file of the drafter (headers only: no tensor is read) and check the
    tensors against ``config.json``: a truncated, empty or garbled file, a missing tensor or a
    shape the config does not predict fails here in one line, not ~1 minute later inside the
    engine. The expected layout is the PyTorch drafter's (``torch_drafter.py``), built on the meta
    device, so this check and the checkpoint writer cannot drift apart."""
    import torch
    from safetensors import SafetensorError, safe_open

    from .checkpoint import drafter_tensor_name, refuse_unservable_variant
    from .torch_drafter import DFlashDrafter

    path = drafter.path
    refuse_unservable_variant(drafter.variant, f"drafter config {path}/config.json")
    files = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    if not files:  # .bin only: the engine's loader reads those; nothing to open cheaply here
        return
    # `dflash-vllm serve` checks before vLLM parses its arguments and the engine pre-flight checks
    # again in the same process: the second check of unchanged files is free.
    signature = (os.path.abspath(path), drafter.to_hf_dict().__repr__(),
                 tuple((n, os.stat(os.path.join(path, n)).st_size, os.stat(os.path.join(path, n)).st_mtime_ns) for n in files))
    if signature in _WEIGHTS_CHECKED:
        return
    found: dict[str, list[int]] = {}
    for name in files:
        file = os.path.join(path, name)
        try:
            with safe_open(file, "pt") as f:
                for key in f.keys():
                    ours = drafter_tensor_name(key)  # speculators' names too; None: the target's
                    if ours is not None:
                        found[ours] = list(f.get_slice(key).get_shape())
        except (SafetensorError, OSError) as e:
            raise DFlashConfigError(
                f"drafter weights {file} cannot be read ({e}); the file is truncated or not safetensors: "
                "copy or re-export it"
            ) from None
    with torch.device("meta"):
        expected = {k: list(v.shape) for k, v in DFlashDrafter(drafter).state_dict().items()}
    missing = sorted(set(expected) - set(found))
    if missing:
        raise DFlashConfigError(
            f"drafter weights in {path} lack {len(missing)} tensors (e.g. {missing[0]}); the checkpoint is "
            "incomplete: copy all of it"
        )
    unexpected = sorted(set(found) - set(expected))
    if unexpected:
        raise DFlashConfigError(
            f"drafter weights in {path} hold tensors this config does not describe (e.g. {unexpected[0]}); "
            "config.json and the weights come from different checkpoints"
        )
    for key, shape in expected.items():
        if found[key] != shape:
            raise DFlashConfigError(
                f"drafter tensor {key} has shape {found[key]} but {path}/config.json implies {shape}; "
                "config.json and the weights come from different checkpoints"
            )
    _WEIGHTS_CHECKED.add(signature)


def check_speculative_config(spec: dict[str, Any]) -> None:
    """The speculative-config mistakes vLLM would answer with a page of validation traceback,
    as one line naming the fix (only keys that are present are checked)."""
    import difflib
    import logging
    import typing

    # Importing vLLM's config the first time logs, on the CPU build, "Triton is installed, but
    # doesn't include CPU backend" before vLLM's logging is set up: a stray second line under
    # our one-line error. Its warnings are held back for this import only.
    logging.disable(logging.WARNING)
    try:
        from vllm.config.speculative import DraftSampleMethod, SpeculativeMethod
    except ImportError:  # another vLLM layout: leave validation to vLLM
        return
    finally:
        logging.disable(logging.NOTSET)
    methods = [m for arg in typing.get_args(SpeculativeMethod) for m in (typing.get_args(arg) or (arg,))]
    method = spec.get("method")
    if method is not None and method not in methods:
        close = difflib.get_close_matches(str(method), methods, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"use one of {sorted(methods)}"
        raise DFlashConfigError(f"speculative config: unknown method {method!r}; {hint}")
    k = spec.get("num_speculative_tokens")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise DFlashConfigError(
            f"speculative config: num_speculative_tokens={k!r}; set it to a whole number >= 1 "
            "(to run without speculation, leave out --speculative-config)"
        )
    sample = spec.get("draft_sample_method")
    if sample is not None and sample not in typing.get_args(DraftSampleMethod):
        raise DFlashConfigError(
            f"speculative config: draft_sample_method={sample!r}; use one of {list(typing.get_args(DraftSampleMethod))}"
        )
