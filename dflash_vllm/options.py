"""Command-line options generated from typed, described dataclass fields.

A setting is declared once, as a field: its type, default and ``help`` make the option, and the
same dataclass is what a run records (the training recipe beside a checkpoint, the bench config
in a result), so a flag and the record of it cannot drift apart.

    @dataclass
    class Job:
        out: str = opt(help="where it goes", required=True)
        steps: int = opt(100, "how many")
        layers: list[int] | None = opt(None, "comma-separated layer ids")

    ap = argparse.ArgumentParser(); add_options(ap, Job); job = parse_into(Job, ap.parse_args())

Types: int, float, str, bool (``--flag``, ``--flag true|false``), ``list[int]`` (comma-separated),
``list[str]`` (the option repeated, or ``nargs`` values after it) and any of them ``| None``.
``choices``, ``metavar`` and ``nargs`` pass through to argparse; ``positional=True`` makes a
bare word (a mode) of a required field.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any

_MISSING = dataclasses.MISSING


def opt(default: Any = _MISSING, help: str = "", *, required: bool = False, choices=None, metavar=None,  # noqa: A002
        nargs=None, positional: bool = False):
    meta = {"help": help, "required": required, "choices": choices, "metavar": metavar, "nargs": nargs,
            "positional": positional}
    if required:
        return dataclasses.field(default=None, metadata=meta)
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _bool(s: str) -> bool:
    v = s.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {s!r}")


def _int_list(s: str) -> list[int]:
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None


def _base(tp):
    """The type without ``| None``."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else str
    return tp


def add_options(parser: argparse.ArgumentParser, cls) -> None:
    """One option per field of the dataclass `cls` (see the module docstring)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        meta = f.metadata or {}
        tp = _base(hints[f.name])
        default = f.default_factory() if f.default_factory is not _MISSING else None if f.default is _MISSING else f.default
        kw: dict[str, Any] = {"dest": f.name, "help": meta.get("help") or None}
        if meta.get("choices"):
            kw["choices"] = meta["choices"]
        if meta.get("metavar"):
            kw["metavar"] = meta["metavar"]
        if meta.get("required"):
            kw["required"] = True
        else:
            kw["default"] = default
        if tp is bool:
            kw.update(type=_bool, nargs="?", const=True, metavar=kw.get("metavar", "true|false"))
        elif typing.get_origin(tp) is list and typing.get_args(tp) == (str,):
            if meta.get("nargs"):  # a fixed number of values after one option
                kw.update(nargs=meta["nargs"])
            else:  # the option repeated
                kw.update(action="append")
        elif typing.get_origin(tp) is list:
            kw.update(type=_int_list, metavar=kw.get("metavar", "N,N,..."))
        elif tp in (int, float, str):
            kw["type"] = tp
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: no command-line form for {tp}")
        if meta.get("positional"):  # a bare word (e.g. a mode) rather than --name
            kw.pop("dest")
            kw.pop("required", None)
            parser.add_argument(f.name, **kw)
        else:
            parser.add_argument("--" + f.name.replace("_", "-"), **kw)


def parse_into(cls, args: argparse.Namespace, **overrides):
    """The dataclass from parsed arguments (fields the parser was not given keep their defaults)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.init and hasattr(args, f.name)}
    values.update(overrides)
    return cls(**values)
