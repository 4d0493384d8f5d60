"""dflash-vllm: DFlash speculative decoding as a vLLM add-on.

Importing this package is cheap; ``register()`` (the ``vllm.general_plugins`` entry point)
does the work lazily and is idempotent, since vLLM loads plugins in every process.
"""

__version__ = "0.1.0"


def register() -> None:
    from ._plugin import register as _register

    _register()
