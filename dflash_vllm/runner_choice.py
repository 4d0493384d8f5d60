"""Which model runner a DFlash engine gets on CUDA, and whose DFlash runs under it.

vLLM 0.32 has two GPU model runners. ``VllmConfig.use_v2_model_runner`` is True by default on
CUDA with Triton; Model Runner V2 then builds its own ``DFlashSpeculator``, never the V1
proposer this add-on replaces, and calls an interface on the drafter model
(``.model``, ``precompute_and_store_context_kv``, ``combine_hidden_states``) that our drafter
does not have. The decision, per engine config (evaluated the same way in every process,
since the plugin loads in each and the config and environment travel with the engine):

- A ``dflash`` engine whose drafter is ``DFlashDraftModel``, with the add-on active: Model
  Runner V1 is pinned (the wrapped property answers False) and our proposer, drafter and
  attention backend run.
- V2 stays when the user forces it (``VLLM_USE_V2_MODEL_RUNNER=1``), when the config needs it
  (HiSparse, watermarking, auxiliary outputs, sampling/trace replay) or when V1 cannot run
  it (vLLM's ``_get_v1_model_runner_unsupported_features``: PCP, adaptive verification,
  mixed sliding/full or candidate-head drafters, ...). Then vLLM's own DFlash runs: the
  ``DFlashDraftModel`` registry entry resolves to vLLM's class under any engine config where
  our path does not run, and the front-end logs one line saying why.
- CPU (no Triton): V1 as always; nothing changes.
"""

from __future__ import annotations

from ._plugin import native_requested  # DFLASH_VLLM_NATIVE=1

ARCH = "DFlashDraftModel"
OUR_DRAFTER = ("dflash_vllm.models.drafter", "DFlashDrafterModel")

_original_fget = None  # VllmConfig.use_v2_model_runner as vLLM defines it


def is_dflash(cfg) -> bool:
    spec = getattr(cfg, "speculative_config", None)
    return spec is not None and getattr(spec, "method", None) == "dflash"


def _draft_architectures(cfg) -> list[str]:
    draft = getattr(cfg.speculative_config, "draft_model_config", None)
    return list(getattr(draft, "architectures", None) or [])


def ours_wanted(cfg) -> bool:
    """A DFlash engine on a ``DFlashDraftModel`` drafter with the add-on active (not native)."""
    return is_dflash(cfg) and not native_requested() and ARCH in _draft_architectures(cfg)


def vllm_picks_v2(cfg) -> bool:
    """What vLLM alone would decide (the unwrapped property)."""
    fget = _original_fget
    if fget is None:
        from vllm.config.vllm import VllmConfig

        fget = VllmConfig.use_v2_model_runner.fget
    return bool(fget(cfg))


def v2_required(cfg) -> str | None:
    """Why this config must run under Model Runner V2 (None: V1 can run it)."""
    import vllm.envs as envs

    if envs.VLLM_USE_V2_MODEL_RUNNER is True:
        return "VLLM_USE_V2_MODEL_RUNNER=1 forces Model Runner V2"
    attention = getattr(cfg, "attention_config", None)
    if getattr(attention, "hisparse_config", None) is not None:
        return "HiSparse requires Model Runner V2"
    if getattr(cfg, "watermark_config", None) is not None:
        return "watermarking requires Model Runner V2"
    if getattr(getattr(cfg, "aux_output_config", None), "enabled", False):
        return "auxiliary outputs require Model Runner V2"
    model = getattr(cfg, "model_config", None)
    if getattr(model, "return_sampling_mask", False):
        return "sampling distribution replay requires Model Runner V2"
    if getattr(model, "enable_trace_replay", False):
        return "trace replay requires Model Runner V2"
    unsupported = getattr(cfg, "_get_v1_model_runner_unsupported_features", lambda: [])()
    if unsupported:
        return "Model Runner V1 does not support " + ", ".join(unsupported)
    return None


def use_v2_model_runner(cfg) -> bool:
    """The wrapped ``VllmConfig.use_v2_model_runner``: V1 pinned for our DFlash where V1 can run."""
    v2 = vllm_picks_v2(cfg)  # raises where vLLM raises (e.g. HiSparse with V2 disabled)
    if v2 and ours_wanted(cfg) and v2_required(cfg) is None:
        return False
    return v2


def install_pin(vllm_config_module) -> None:
    """Wrap ``VllmConfig.use_v2_model_runner`` (patch 'runner-pin'); idempotent."""
    global _original_fget
    from .patches import require

    cls = require("runner-pin", vllm_config_module)  # VllmConfig
    prop = cls.__dict__.get("use_v2_model_runner")
    if not isinstance(prop, property):
        from .patches import PatchTargetMissing

        raise PatchTargetMissing(f"VllmConfig.use_v2_model_runner is a {type(prop).__name__}, not a property: "
                                 "this vLLM is not supported; set DFLASH_VLLM_NATIVE=1")
    if getattr(prop.fget, "_dflash_pin", False):
        return
    _original_fget = prop.fget

    def fget(self):
        return use_v2_model_runner(self)

    fget._dflash_pin = True  # type: ignore[attr-defined]
    fget.__doc__ = prop.__doc__
    cls.use_v2_model_runner = property(fget)


def our_path_runs(cfg) -> tuple[bool, str]:
    """(True, why) if our proposer/drafter run for this engine config, else (False, why not)."""
    if not is_dflash(cfg):
        return False, "not a DFlash engine"
    if native_requested():
        return False, "DFLASH_VLLM_NATIVE=1"
    archs = _draft_architectures(cfg)
    if ARCH not in archs:
        return False, f"the drafter's architecture {archs} is not {ARCH}"
    if cfg.use_v2_model_runner:
        return False, v2_required(cfg) or "vLLM picked Model Runner V2"
    if vllm_picks_v2(cfg):
        return True, "Model Runner V1 pinned (vLLM would have picked V2)"
    return True, "Model Runner V1"


def handover_line(cfg) -> str | None:
    """The one front-end log line when a DFlash engine hands over to vLLM's own DFlash."""
    from . import __version__

    if not is_dflash(cfg) or native_requested():
        return None
    ok, why = our_path_runs(cfg)
    if ok:
        return None
    return (f"dflash-vllm {__version__}: {why}; our DFlash runs only under Model Runner V1, "
            "so vLLM's built-in DFlash runs this engine")


def _make_entry_class():
    from vllm.model_executor.models.registry import _BaseRegisteredModel, _LazyRegisteredModel

    class RunnerAwareDrafter(_BaseRegisteredModel):
        """``DFlashDraftModel`` -> our drafter under an engine config where our path runs,
        vLLM's own entry otherwise. Outside any engine config (front-end inspection) it
        answers ours, as the add-on always did; models load inside the worker's config."""

        def __init__(self, native):
            self.native = native
            self.ours = _LazyRegisteredModel(*OUR_DRAFTER)

        def pick(self):
            from vllm.config import get_current_vllm_config_or_none

            cfg = get_current_vllm_config_or_none()
            if cfg is None or not is_dflash(cfg):
                return self.ours if not native_requested() else self.native
            return self.ours if our_path_runs(cfg)[0] else self.native

        def inspect_model_cls(self):
            return self.pick().inspect_model_cls()

        def load_model_cls(self):
            return self.pick().load_model_cls()

        # vLLM caches resolutions per (arch, entry): the hash carries the choice, so a
        # cached class from one choice is never served under the other.
        def __hash__(self):
            return hash((type(self).__name__, self.pick() is self.ours))

        def __eq__(self, other):
            return self is other

        def __repr__(self):
            return f"RunnerAwareDrafter(ours={self.ours!r}, native={self.native!r})"

    return RunnerAwareDrafter


_entry_class = None


def entry_class():
    global _entry_class
    if _entry_class is None:
        _entry_class = _make_entry_class()
    return _entry_class


def register_drafter(registry=None) -> None:
    """Install the runner-aware ``DFlashDraftModel`` entry (patch 'drafter-model'); idempotent."""
    from .patches import require

    if registry is None:
        from vllm.model_executor.models import registry as registry_module

        require("drafter-model", registry_module)
        registry = registry_module.ModelRegistry
    current = registry.models[ARCH]
    if isinstance(current, entry_class()):
        return
    registry.models[ARCH] = entry_class()(native=current)


# -- what Model Runner V2 calls on the drafter model it loads ---------------------------------
_V2_SOURCES = (  # (module, the name the drafter model has there)
    ("vllm.v1.worker.gpu.spec_decode.dflash.speculator", "self.model"),
    ("vllm.v1.worker.gpu.spec_decode.speculator", "self.model"),
    ("vllm.v1.worker.gpu.spec_decode.dflash.utils", "dflash_model"),
)


def v2_drafter_interface() -> set[str]:
    """Attributes V2's DFlash speculator reads on the drafter without a hasattr/getattr guard,
    read from vLLM's own source (so a new vLLM that calls more is checked too)."""
    import importlib.util
    import re

    names: set[str] = set()
    guarded: set[str] = set()
    for module, var in _V2_SOURCES:
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"vLLM has no {module}: cannot tell what Model Runner V2 calls on a drafter")
        with open(spec.origin) as f:
            src = f.read()
        v = re.escape(var)
        guarded |= set(re.findall(rf"(?:hasattr|getattr)\(\s*{v}\s*,\s*[\"'](\w+)[\"']", src))
        # reads only: not "del x.a", not "x.a = ..."
        names |= set(re.findall(rf"(?<!del ){v}\.(\w+)\b(?!\s*=[^=])", src))
    return {n for n in names - guarded if not n.startswith("__")}


def _assigns(cls, name: str) -> bool:
    import inspect
    import re

    for klass in cls.__mro__:
        if klass is object:
            continue
        try:
            src = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if re.search(rf"self\.{re.escape(name)}\s*(:[^=]*)?=[^=]", src):
            return True
    return False


def v2_interface_missing(model_cls) -> list[str]:
    """The names of ``v2_drafter_interface()`` that ``model_cls`` neither defines nor assigns
    in its constructor: what V2 would fail on if it loaded this class."""
    return sorted(n for n in v2_drafter_interface() if not hasattr(model_cls, n) and not _assigns(model_cls, n))


def describe_spec_decode(worker) -> dict:
    """Run in a worker (``llm.collective_rpc(describe_spec_decode)``): which model runner, which
    proposer/speculator and which drafter model class this engine actually built, and how many
    of the target's and drafter's linears run at padded row counts (fixes/cpu_gemm_widths.py)."""
    from .fixes.cpu_gemm_widths import MARK

    def name(obj):
        return None if obj is None else f"{type(obj).__module__}.{type(obj).__name__}"

    runner = worker.model_runner
    proposer = getattr(runner, "drafter", None)  # Model Runner V1
    if proposer is None:
        proposer = getattr(runner, "speculator", None)  # Model Runner V2
    models = [m for m in (getattr(runner, "model", None), getattr(proposer, "model", None)) if m is not None]
    padded = sum(hasattr(getattr(mod, "cpu_linear", None), MARK) for m in models for mod in m.modules())
    return {"runner": name(runner), "proposer": name(proposer),
            "drafter_model": name(getattr(proposer, "model", None)), "padded_linears": padded}
