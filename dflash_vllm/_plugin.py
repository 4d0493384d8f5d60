"""What the ``vllm.general_plugins`` entry point installs, once per process.

- our drafter model for the ``DFlashDraftModel`` architecture (vLLM's ModelRegistry), for
  engines where our proposer runs; vLLM's own class everywhere else (runner_choice.py);
- Model Runner V1 pinned for our DFlash engines where vLLM would pick V2 (runner_choice.py);
- our KV-injection backend as vLLM's CUSTOM attention backend;
- our proposer in place of vLLM's native one, patched into the model runner when (and if)
  that module is imported, so front-end processes never import it;
- a fix for vLLM 0.32's CPU rejection-sampler ``expand_kernel`` (see fixes/cpu_expand.py);
- oneDNN's process-wide primitive cache bounded to 64 on CPU (see fixes/cpu_onednn_cache.py);
- Ray tensor parallel on the CPU platform, which vLLM 0.32 refuses (see fixes/ray_cpu.py);
- draft/verify time per step and tau on Prometheus /metrics (see metrics.py);
- a pre-flight check of the drafter/target pair when the engine config is created, so a bad
  pairing fails with one line before any engine process starts.

``DFLASH_VLLM_NATIVE=1`` skips all of it: vLLM's built-in DFlash runs on the same weights.
Every patch is listed, with its target asserted before use, in patches.py; on a vLLM outside
``patches.SUPPORTED_VLLM`` none is applied and a DFlash engine is refused with one line.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

from . import __version__, envs


_RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
_done = False


def native_requested() -> bool:
    return envs.enabled(envs.NATIVE)


def register() -> None:
    global _done
    if _done:
        return
    _done = True
    from . import patches, runner_choice  # every patch below is in patches.PATCHES

    refusal = patches.unsupported_vllm()
    if refusal is not None:  # an untested vLLM: no patch at all; a DFlash engine is refused
        _install_preflight(validate=False, refusal=None if native_requested() else refusal)
        return
    _when_imported(_RUNNER_MODULE, _on_runner_import)
    _when_imported("vllm._custom_ops", _bound_onednn_cache)
    if native_requested():
        _install_preflight(validate=False)
        return

    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    runner_choice.register_drafter()  # DFlashDraftModel: ours under V1, vLLM's own otherwise
    _when_imported("vllm.config.vllm", runner_choice.install_pin)  # V1 pinned for our DFlash
    patches.require("attention-backend")
    register_backend(AttentionBackendEnum.CUSTOM, "dflash_vllm.attention.backend.DFlashAttentionBackend")
    _when_imported("vllm.utils.cpu_triton_utils", _patch_cpu_kernels)
    _when_imported("vllm.v1.executor.abstract", _patch_executor_selection)
    _install_preflight(validate=True)


def _log(msg: str, *args) -> None:
    # Fetched at call time: vLLM's dictConfig disables loggers that existed before it ran.
    from vllm.logger import init_logger

    logger = init_logger("vllm.dflash_vllm")
    logger.disabled = False
    logger.info(msg, *args)


def _on_runner_import(module) -> None:
    # vLLM defect fixes apply whichever DFlash runs (and without speculation): see fixes/.
    if not envs.enabled(envs.NO_SEED_FIX):
        from .fixes import cpu_seeded_chunks

        cpu_seeded_chunks.install(module)
    if not native_requested():
        _patch_runner(module)


def _bound_onednn_cache(module) -> None:
    # Whichever DFlash runs, and without speculation: it is a CPU serving default (see fixes/).
    from . import patches
    from .fixes import cpu_onednn_cache

    if module.__name__ == "vllm._custom_ops" and getattr(module, "_supports_onednn", False):  # CPU build
        patches.require("cpu-onednn-cache", module)
        cpu_onednn_cache.install(module)


def _patch_runner(module) -> None:
    from . import patches
    from .proposers.dflash import DFlashProposer

    patches.require("proposer", module)
    if module.DFlashProposer is DFlashProposer:
        return
    module.DFlashProposer = DFlashProposer  # the runner constructs and isinstance-checks this name
    if envs.enabled(envs.STEP_METRICS):
        from . import metrics

        patches.require("step-timers", module)
        metrics.install_runner_timers(module)
    _log(
        "dflash-vllm %s active: proposer dflash_vllm.proposers.dflash.DFlashProposer, "
        "attention backend dflash_vllm.attention.backend.DFlashAttentionBackend (CUSTOM)",
        __version__,
    )


def _patch_cpu_kernels(module) -> None:
    from . import patches
    from .fixes import cpu_expand

    if module.__name__ == "vllm.utils.cpu_triton_utils":  # vLLM's module (tests pass stand-ins)
        patches.require("cpu-expand", module)
    cpu_expand.install(module)


def _patch_executor_selection(module) -> None:
    """``distributed_executor_backend="ray"`` on the CPU platform -> fixes.ray_cpu.CpuRayExecutor
    (imported, with Ray, only then)."""
    from . import patches

    executor = patches.require("ray-cpu-executor", module)
    original = executor.get_class
    if getattr(original, "_dflash_ray_cpu", False):
        return

    def get_class(vllm_config):
        backend = vllm_config.parallel_config.distributed_executor_backend
        if backend == "ray" and vllm_config.device_config.device_type == "cpu":
            import vllm.envs as envs

            if envs.VLLM_USE_RAY_V2_EXECUTOR_BACKEND:
                from .fixes.ray_cpu import CpuRayExecutor

                _log("dflash-vllm: Ray executor on the CPU platform via dflash_vllm.fixes.ray_cpu.CpuRayExecutor")
                return CpuRayExecutor
        return original(vllm_config)

    get_class._dflash_ray_cpu = True  # type: ignore[attr-defined]
    executor.get_class = staticmethod(get_class)


def _install_preflight(validate: bool, refusal: str | None = None) -> None:
    from . import patches, runner_choice

    EngineArgs = patches.require("preflight")  # noqa: N806
    original = EngineArgs.create_engine_config
    if getattr(original, "_dflash_preflight", False):
        return

    def create_engine_config(self, *args, **kwargs):
        from .adaptive import pop_config_key

        pop_config_key(self)  # "dflash_fixed_k": vLLM's SpeculativeConfig rejects unknown keys
        if refusal is not None and _spec_get(self.speculative_config, "method") == "dflash":
            from .config import DFlashConfigError

            raise DFlashConfigError(refusal)
        if validate:  # before vLLM resolves the drafter path (its own error is a page long)
            _precheck_drafter_path(self.speculative_config)
        config = original(self, *args, **kwargs)
        spec = config.speculative_config
        if spec is not None and spec.method == "dflash":
            if validate:
                preflight(config)
                handover = runner_choice.handover_line(config)  # V2 runs: vLLM's own DFlash
                if handover is not None:
                    _log("%s", handover)
                else:
                    if runner_choice.vllm_picks_v2(config):
                        _log("dflash-vllm %s: Model Runner V1 pinned for this DFlash engine (vLLM would pick V2, "
                             "which never runs our proposer; see README 'On CUDA')", __version__)
                    from . import metrics

                    metrics.export()  # draft/verify time on /metrics (see metrics.py)
            elif refusal is None:
                _log("dflash-vllm %s: DFLASH_VLLM_NATIVE=1, vLLM's built-in DFlash stays in charge", __version__)
        return config

    create_engine_config._dflash_preflight = True  # type: ignore[attr-defined]
    EngineArgs.create_engine_config = create_engine_config


def _spec_get(spec, key):
    if spec is None:
        return None
    return spec.get(key) if isinstance(spec, dict) else getattr(spec, key, None)


def _precheck_drafter_path(spec) -> None:
    if spec is None:
        return
    from .config import DrafterConfig, check_drafter_weights, check_speculative_config

    if isinstance(spec, dict):
        check_speculative_config(spec)
    get = spec.get if isinstance(spec, dict) else lambda k, d=None: getattr(spec, k, d)
    if get("method") == "dflash" and get("model"):
        check_drafter_weights(DrafterConfig.from_pretrained(get("model")))


def preflight(vllm_config) -> None:
    """Validate a dflash speculative config in the front-end; raises DFlashConfigError."""
    spec = vllm_config.speculative_config
    if spec is None or spec.method != "dflash":
        return
    from .config import DrafterConfig, validate_pair

    model_config = vllm_config.model_config
    target_hf = model_config.hf_text_config
    validate_pair(
        DrafterConfig.from_pretrained(spec.draft_model_config.model),
        target_num_layers=target_hf.num_hidden_layers,
        target_hidden_size=target_hf.hidden_size,
        target_vocab_size=model_config.get_vocab_size(),
        num_speculative_tokens=spec.num_speculative_tokens,
        target_architectures=list(model_config.architectures),
    )


class _PatchAfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, name, callback):
        self.name, self.callback, self._spec = name, callback, None

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name or self._spec is not None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None:
            return None
        self._spec = spec
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self.callback(module)


def _when_imported(name: str, callback) -> None:
    if name in sys.modules:
        callback(sys.modules[name])
    else:
        sys.meta_path.insert(0, _PatchAfterImport(name, callback))
