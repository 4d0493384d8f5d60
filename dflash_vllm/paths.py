"""Where the add-on finds its models and writes results, in a source checkout and in a wheel.

The demo pair (the 3.6M-parameter task-suite target and its drafter, 21 MB) ships inside the
package, so ``dflash-vllm demo`` / ``bench`` / ``soak`` run from a plain wheel install;
``deploy/demo/{target,drafter}`` in the checkout are links to it. The SmolLM2 pair is made by
``./setup.sh`` (the target, 517 MB) and ``deploy/smollm2/make_drafter.sh`` in a checkout only.
"""

from __future__ import annotations

import os

PACKAGE = os.path.dirname(os.path.abspath(__file__))
DEMO_TARGET = os.path.join(PACKAGE, "demo_pair", "target")
DEMO_DRAFTER = os.path.join(PACKAGE, "demo_pair", "drafter")


def _checkout() -> str | None:
    root = os.path.dirname(PACKAGE)
    return root if os.path.isfile(os.path.join(root, "pyproject.toml")) and os.path.isdir(os.path.join(root, "deploy")) else None


REPO = _checkout()  # the source checkout, or None in a wheel install
SMOL_TARGET = os.path.join(REPO or os.getcwd(), "deploy", "smollm2", "target")
SMOL_DRAFTER = os.path.join(REPO or os.getcwd(), "deploy", "smollm2", "drafter")


def results_dir() -> str:
    """bench/results in a checkout, ./bench/results elsewhere."""
    return os.path.join(REPO or os.getcwd(), "bench", "results")
