"""Command-line options generated from dataclass fields (dflash_vllm/options.py)."""

import argparse
import dataclasses
import pathlib

import pytest

from dflash_vllm.bench import BenchConfig
from dflash_vllm.bench.ablations import Ablations
from dflash_vllm.bench.context_sweep import ContextSweep
from dflash_vllm.bench.onednn_cache import OnednnRepro
from dflash_vllm.bench.profile import ProfileJob
from dflash_vllm.demo import DemoOptions
from dflash_vllm.gpu_check import GpuCheck
from dflash_vllm.options import add_options, opt, parse_into
from dflash_vllm.smollm2 import ConvertJob
from dflash_vllm.soak import SoakOptions
from dflash_vllm.training.evaluate import EvaluateJob
from dflash_vllm.training.prompt_mix import PromptsJob
from dflash_vllm.training.regen import RegenJob
from dflash_vllm.training.target import TargetRecipe
from dflash_vllm.training.trainer import Recipe, TrainJob

ROOT = pathlib.Path(__file__).resolve().parents[2]
OPTION_CLASSES = [Recipe, TrainJob, RegenJob, BenchConfig, PromptsJob, EvaluateJob, DemoOptions, SoakOptions,
                  TargetRecipe, ConvertJob, GpuCheck, Ablations, ContextSweep, OnednnRepro, ProfileJob]


@dataclasses.dataclass
class Job:
    out: str = opt(help="where", required=True)
    steps: int = opt(100, "how many")
    lr: float = opt(1e-3, "rate")
    layers: list[int] | None = opt(None, "ids")
    eager: bool = opt(False, "skip compile")
    dtype: str = opt("float32", "storage", choices=["float32", "float16"])


def _parse(argv):
    ap = argparse.ArgumentParser(exit_on_error=False)
    add_options(ap, Job)
    return parse_into(Job, ap.parse_args(argv))


def test_types_defaults_and_forms():
    assert _parse(["--out", "d"]) == Job(out="d")
    job = _parse(["--out", "d", "--steps", "7", "--lr", "0.5", "--layers", "1,7,14", "--eager", "--dtype", "float16"])
    assert job == Job(out="d", steps=7, lr=0.5, layers=[1, 7, 14], eager=True, dtype="float16")
    assert _parse(["--out", "d", "--eager", "false"]).eager is False
    assert _parse(["--out", "d", "--eager", "true"]).eager is True


@pytest.mark.parametrize("argv", [["--steps", "3"], ["--out", "d", "--steps", "x"], ["--out", "d", "--eager", "maybe"],
                                  ["--out", "d", "--layers", "1,a"], ["--out", "d", "--dtype", "int8"]])
def test_bad_values_are_refused(argv, capsys):
    ap = argparse.ArgumentParser()
    add_options(ap, Job)
    with pytest.raises(SystemExit) as e:
        ap.parse_args(argv)
    assert e.value.code == 2
    assert ": error: " in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("cls", OPTION_CLASSES)
def test_every_option_is_typed_and_described(cls):
    ap = argparse.ArgumentParser()
    add_options(ap, cls)
    described = {a.dest: a.help for a in ap._actions if a.dest != "help"}  # noqa: SLF001
    assert set(described) == {f.name for f in dataclasses.fields(cls)}
    assert [k for k, h in described.items() if not h] == []


def test_recipe_options_round_trip():
    """What `dflash-vllm train` parses is what the checkpoint records (asdict of the recipe)."""
    ap = argparse.ArgumentParser()
    add_options(ap, Recipe)
    r = parse_into(Recipe, ap.parse_args(["--lr", "0.001", "--target-layer-ids", "1,7", "--random-anchors", "false",
                                          "--loss-positions", "8"]))
    assert dataclasses.asdict(r) == {**dataclasses.asdict(Recipe()), "lr": 0.001, "target_layer_ids": [1, 7],
                                     "random_anchors": False, "loss_positions": 8}


@pytest.mark.parametrize("tool", ["context-sweep", "profile", "ablations", "sampling-tau", "onednn-cache", "gemm-widths",
                                  "context-queue"])
def test_bench_tools_are_subcommands(tool, capsys):
    """The narrower measurements live under `dflash-vllm bench` (no scripts with sys.path edits)."""
    from dflash_vllm.bench import main

    with pytest.raises(SystemExit) as e:
        main([tool, "--help"])
    assert e.value.code == 0 and f"dflash-vllm bench {tool}" in capsys.readouterr().out


def test_no_hand_written_options():
    """Every command's options come from a dataclass (a new add_argument would bypass the record)."""
    hand = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "dflash_vllm").rglob("*.py") if p.name != "options.py"
            for i, line in enumerate(p.read_text().splitlines(), 1) if ".add_argument(" in line]
    assert hand == []


def test_positional_mode_and_repeated_option():
    ap = argparse.ArgumentParser()
    add_options(ap, ProfileJob)
    assert parse_into(ProfileJob, ap.parse_args(["k0", "--concurrency", "64"])) == ProfileJob(what="k0", concurrency=64)
    ap = argparse.ArgumentParser()
    add_options(ap, SoakOptions)
    job = parse_into(SoakOptions, ap.parse_args(["--server-env", "A=1", "--server-env", "B=2"]))
    assert job.server_env == ["A=1", "B=2"] and SoakOptions().server_env == []
