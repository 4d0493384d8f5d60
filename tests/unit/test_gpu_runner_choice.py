"""The GPU decisions, on CPU: which model runner a DFlash engine gets where vLLM would pick
Model Runner V2 (CUDA with Triton), which drafter class each runner receives, the hand-over to
vLLM's own DFlash, the patch table and the supported vLLM range.

Triton is mocked (``vllm.config.vllm.HAS_TRITON``): it is the one input of vLLM 0.32's runner
decision that differs between this CPU build and CUDA. Real engine configs are built (no engine
starts). The invariant every test checks through ``_class_for_drafter``: under any config where
V2 runs, the ``DFlashDraftModel`` class it resolves has everything V2's DFlash speculator calls
(read from vLLM's source), so these tests fail if V2 would get our drafter.
"""

from __future__ import annotations

import types

import pytest

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module", autouse=True)
def plugin():
    import dflash_vllm
    from dflash_vllm import _plugin

    if _plugin.native_requested():
        pytest.skip("DFLASH_VLLM_NATIVE=1 in the environment")
    dflash_vllm.register()  # what vLLM does in every process (idempotent)
    return _plugin


@pytest.fixture
def cuda_triton(monkeypatch):
    import vllm.config.vllm as vllm_config_module

    monkeypatch.setattr(vllm_config_module, "HAS_TRITON", True)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    return monkeypatch


def _engine_config(tiny_dir, spec: bool = True):
    from vllm.engine.arg_utils import EngineArgs

    speculative_config = None
    if spec:
        speculative_config = {"method": "dflash", "model": str(tiny_dir / "drafter"), "num_speculative_tokens": 3}
    return EngineArgs(model=str(tiny_dir / "target"), speculative_config=speculative_config, dtype="float32",
                      max_model_len=512, skip_tokenizer_init=True, enforce_eager=True).create_engine_config()


def _class_for_drafter(cfg):
    """The class a worker of this engine would load for DFlashDraftModel (vLLM's own resolution,
    inside the engine config as the worker's load_model sets it), checked against the runner."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.models.registry import ModelRegistry

    from dflash_vllm.runner_choice import v2_interface_missing

    with set_current_vllm_config(cfg):
        cls, arch = ModelRegistry.resolve_model_cls(["DFlashDraftModel"], cfg.speculative_config.draft_model_config)
    assert arch == "DFlashDraftModel"
    if cfg.use_v2_model_runner:
        missing = v2_interface_missing(cls)
        assert not missing, (f"Model Runner V2 would load {cls.__module__}.{cls.__name__}, which lacks "
                             f"{missing}: V2's DFlashSpeculator calls them")
    return cls


def test_v2_interface_check_has_teeth():
    """What V2 calls, read from vLLM's source, and that our drafter lacks it (so the check can fail)."""
    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3ForCausalLM

    from dflash_vllm.models.drafter import DFlashDrafterModel
    from dflash_vllm.runner_choice import v2_drafter_interface, v2_interface_missing

    calls = v2_drafter_interface()
    assert {"precompute_and_store_context_kv", "combine_hidden_states", "model"} <= calls, calls
    assert {"precompute_and_store_context_kv", "combine_hidden_states", "model"} <= set(
        v2_interface_missing(DFlashDrafterModel))
    assert v2_interface_missing(DFlashQwen3ForCausalLM) == []


def test_registry_entry_keeps_vllm_class():
    from vllm.model_executor.models.registry import ModelRegistry

    from dflash_vllm.runner_choice import entry_class

    entry = ModelRegistry.models["DFlashDraftModel"]
    assert isinstance(entry, entry_class())
    assert (entry.native.module_name, entry.native.class_name) == ("vllm.model_executor.models.qwen3_dflash",
                                                                    "DFlashQwen3ForCausalLM")


def test_cuda_default_pins_v1_and_runs_ours_then_forced_v2_hands_over(tiny_dir, cuda_triton):
    from dflash_vllm import runner_choice

    cfg = _engine_config(tiny_dir)
    assert runner_choice.vllm_picks_v2(cfg), "the mock must reproduce vLLM's CUDA default (V2)"
    assert cfg.use_v2_model_runner is False, "V1 is not pinned for our DFlash engine"
    assert runner_choice.our_path_runs(cfg) == (True, "Model Runner V1 pinned (vLLM would have picked V2)")
    assert runner_choice.handover_line(cfg) is None
    cls = _class_for_drafter(cfg)
    assert (cls.__module__, cls.__name__) == ("dflash_vllm.models.drafter", "DFlashDrafterModel")

    # The user forces V2 (same process, same registry: vLLM's resolution cache must not serve ours).
    cuda_triton.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    cfg_v2 = _engine_config(tiny_dir)
    assert cfg_v2.use_v2_model_runner is True
    ok, why = runner_choice.our_path_runs(cfg_v2)
    assert not ok and "VLLM_USE_V2_MODEL_RUNNER=1" in why
    line = runner_choice.handover_line(cfg_v2)
    assert line is not None and "\n" not in line and "vLLM's built-in DFlash" in line
    cls = _class_for_drafter(cfg_v2)
    assert cls.__module__ == "vllm.model_executor.models.qwen3_dflash"

    # Explicit V1 works as before.
    cuda_triton.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    assert cfg.use_v2_model_runner is False and runner_choice.our_path_runs(cfg)[0]


def test_cpu_without_triton_is_v1_as_before(tiny_dir, monkeypatch):
    import vllm.config.vllm as vllm_config_module

    from dflash_vllm import runner_choice

    monkeypatch.setattr(vllm_config_module, "HAS_TRITON", False)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    cfg = _engine_config(tiny_dir)
    assert cfg.use_v2_model_runner is False and not runner_choice.vllm_picks_v2(cfg)
    assert runner_choice.our_path_runs(cfg) == (True, "Model Runner V1")
    assert _class_for_drafter(cfg).__name__ == "DFlashDrafterModel"


# -- the pin rule on its own (fake configs: cheap, every branch) -------------------------------
def _fake(method="dflash", archs=("DFlashDraftModel",), v1_unsupported=(), **attrs):
    spec = None
    if method is not None:
        spec = types.SimpleNamespace(method=method, draft_model_config=types.SimpleNamespace(architectures=list(archs)))
    cfg = types.SimpleNamespace(
        speculative_config=spec, attention_config=types.SimpleNamespace(hisparse_config=None), watermark_config=None,
        aux_output_config=types.SimpleNamespace(enabled=False),
        model_config=types.SimpleNamespace(return_sampling_mask=False, enable_trace_replay=False),
        _get_v1_model_runner_unsupported_features=lambda: list(v1_unsupported),
    )
    for k, v in attrs.items():
        setattr(cfg, k, v)
    return cfg


@pytest.mark.parametrize(
    "cfg, v2",
    [
        (_fake(), False),  # ours: V1 pinned
        (_fake(method=None), True),  # no speculation: untouched
        (_fake(method="ngram"), True),  # other methods: untouched
        (_fake(archs=("DFlash2DraftModel",)), True),  # not our architecture: vLLM's own DFlash, V2
        (_fake(v1_unsupported=("prefill context parallel",)), True),  # V1 cannot run it
        (_fake(watermark_config=object()), True),  # needs V2
        (_fake(attention_config=types.SimpleNamespace(hisparse_config=object())), True),
        (_fake(aux_output_config=types.SimpleNamespace(enabled=True)), True),
    ],
)
def test_pin_rule(cfg, v2, monkeypatch):
    from dflash_vllm import runner_choice

    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    monkeypatch.setattr(runner_choice, "_original_fget", lambda self: True)  # vLLM says V2
    assert runner_choice.use_v2_model_runner(cfg) is v2
    monkeypatch.setattr(runner_choice, "_original_fget", lambda self: False)  # vLLM says V1: never changed
    assert runner_choice.use_v2_model_runner(cfg) is False


def test_pin_rule_respects_native_and_forced_v2(monkeypatch):
    from dflash_vllm import runner_choice

    monkeypatch.setattr(runner_choice, "_original_fget", lambda self: True)
    monkeypatch.setenv("DFLASH_VLLM_NATIVE", "1")
    assert runner_choice.use_v2_model_runner(_fake()) is True
    monkeypatch.delenv("DFLASH_VLLM_NATIVE")
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    assert runner_choice.use_v2_model_runner(_fake()) is True
    assert "VLLM_USE_V2_MODEL_RUNNER=1" in runner_choice.v2_required(_fake())


# -- the patch table and the supported versions -------------------------------------------------
def test_every_patch_target_exists_in_installed_vllm():
    from dflash_vllm import patches

    assert patches.check_all() == [], patches.table_markdown()
    names = [p.name for p in patches.PATCHES]
    assert len(names) == len(set(names))
    for p in patches.PATCHES:
        assert p.what and p.why and p.versions and p.drop and p.platform in ("all", "cpu", "cuda")


def test_require_fails_loudly_on_a_missing_target():
    from dflash_vllm import patches

    with pytest.raises(patches.PatchTargetMissing) as e:
        patches.require("proposer", types.SimpleNamespace())  # a runner module without DFlashProposer
    assert "\n" not in str(e.value) and "DFLASH_VLLM_NATIVE=1" in str(e.value)


def test_supported_range_matches_pyproject():
    import pathlib
    import tomllib

    from dflash_vllm import patches

    pyproject = tomllib.loads((pathlib.Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["optional-dependencies"]["cuda"] == [f"vllm{patches.SUPPORTED_VLLM}"]
    assert patches.unsupported_vllm() is None, "the installed vLLM is outside the declared range"
    assert patches.version_supported("0.32.0+cpu") and patches.version_supported("0.32.1")
    refusal = patches.unsupported_vllm("0.33.0")
    assert refusal is not None and "\n" not in refusal and "0.33.0" in refusal


def test_unsupported_vllm_refuses_a_dflash_engine_with_one_line(plugin, tiny_dir, monkeypatch):
    from vllm.engine.arg_utils import EngineArgs

    from dflash_vllm.config import DFlashConfigError

    def stock(self, *args, **kwargs):
        raise AssertionError("vLLM's config creation ran: the refusal came too late")

    monkeypatch.setattr(EngineArgs, "create_engine_config", stock)
    plugin._install_preflight(validate=False, refusal="dflash-vllm 0.1.0 supports vLLM X, found Y")
    args = EngineArgs(model=str(tiny_dir / "target"), skip_tokenizer_init=True,
                      speculative_config={"method": "dflash", "model": str(tiny_dir / "drafter"),
                                          "num_speculative_tokens": 3})
    with pytest.raises(DFlashConfigError, match="supports vLLM X, found Y"):
        args.create_engine_config()
    args.speculative_config = None  # everything else still reaches vLLM
    with pytest.raises(AssertionError, match="config creation ran"):
        args.create_engine_config()


def test_readme_lists_every_patch():
    import pathlib

    from dflash_vllm import patches

    readme = (pathlib.Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("## On CUDA: which model runner runs", 1)[1].split("\n## ", 1)[0]
    for p in patches.PATCHES:
        assert f"| {p.name} | `{p.target}`" in section, f"README's patch table lacks {p.name} ({p.target})"
    assert patches.SUPPORTED_VLLM in section
