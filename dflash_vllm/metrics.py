"""DFlash series on the server's Prometheus ``/metrics``, next to vLLM's own.

vLLM already exports drafts, draft tokens and accepted tokens (in total and per draft position:
``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_accepted_tokens_per_pos_total``,
...). This adds what it lacks:

- ``dflash:draft_time_seconds`` (histogram): drafter time per engine step (context K/V write +
  one block forward + draft sampling), measured in the model runner;
- ``dflash:verify_time_seconds`` (histogram): the target's forward over the verified blocks per
  engine step (``execute_model``);
- ``dflash:mean_acceptance_length`` (gauge): tau = 1 + accepted / drafts over the server's
  lifetime, from vLLM's counters at scrape time;
- ``dflash:submitted_draft_tokens`` (histogram, buckets 0..K): drafts each decoding request
  submitted for verification per engine step, as the adaptive policy chose them (0 included,
  which vLLM's own spec-decode counters never see).

The times are measured where the model runs (the engine-core or rank-0 worker process) and
read where ``/metrics`` is served (the API server): when the front-end makes a DFlash engine
config it creates a small shared-memory table (path in ``DFLASH_VLLM_STEP_TIMES``, inherited by
the engine processes it then starts), rank 0 writes bucket counts into it, and a Prometheus
collector in the front-end exports them at scrape time. On CUDA the times come from CUDA events
read back one step later (no synchronisation added); on CPU from the wall clock.
"""

from __future__ import annotations

import atexit
import mmap
import os
import struct
import tempfile
import time

from . import envs
from .acceptance import tau_from_counters

BUCKETS = (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048)
KINDS = ("draft", "verify")
_SLOTS = len(BUCKETS) + 3  # per kind: one count per bucket, +Inf, sum, count
_MAX_LEN = 63  # submitted draft lengths 0.._MAX_LEN (K is at most the drafter's block_size - 1)
_LEN_BASE = 8 * _SLOTS * len(KINDS)  # then: K, one count per length 0.._MAX_LEN
_SIZE = _LEN_BASE + 8 * (_MAX_LEN + 2)


class StepTimeTable:
    """Fixed-layout float64 table: per kind, non-cumulative bucket counts, +Inf, sum, count."""

    def __init__(self, path: str):
        self.path = path
        fd = os.open(path, os.O_RDWR)
        try:
            self.buf = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)

    @classmethod
    def create(cls) -> StepTimeTable:
        d = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        fd, path = tempfile.mkstemp(prefix="dflash-vllm-steps-", dir=d)
        os.write(fd, b"\0" * _SIZE)
        os.close(fd)
        atexit.register(lambda: os.path.exists(path) and os.unlink(path))
        return cls(path)

    def _at(self, kind: int, slot: int) -> int:
        return 8 * (kind * _SLOTS + slot)

    def _add(self, off: int, x: float) -> None:
        (v,) = struct.unpack_from("d", self.buf, off)
        struct.pack_into("d", self.buf, off, v + x)

    def observe(self, kind: str, seconds: float) -> None:  # a single writer: rank 0
        k = KINDS.index(kind)
        b = next((i for i, ub in enumerate(BUCKETS) if seconds <= ub), len(BUCKETS))
        self._add(self._at(k, b), 1.0)
        self._add(self._at(k, len(BUCKETS) + 1), seconds)
        self._add(self._at(k, len(BUCKETS) + 2), 1.0)

    def read(self, kind: str) -> tuple[list[float], float, float]:
        k = KINDS.index(kind)
        vals = struct.unpack_from(f"{_SLOTS}d", self.buf, self._at(k, 0))
        return list(vals[: len(BUCKETS) + 1]), vals[-2], vals[-1]

    def observe_lengths(self, counts) -> None:
        """counts[j] = requests that submitted j drafts this step (j = 0..K)."""
        k = min(len(counts) - 1, _MAX_LEN)
        struct.pack_into("d", self.buf, _LEN_BASE, float(k))
        for j in range(k + 1):
            if counts[j]:
                self._add(_LEN_BASE + 8 * (1 + j), float(counts[j]))

    def observe_undrafted(self, n: int) -> None:
        """n requests submitted 0 drafts (a step of the policy's idle window; K as last observed)."""
        self._add(_LEN_BASE + 8, float(n))

    def read_lengths(self) -> list[float]:
        """[count of length 0, ..., count of length K] ([] before any draft step)."""
        vals = struct.unpack_from(f"{_MAX_LEN + 2}d", self.buf, _LEN_BASE)
        return list(vals[1 : int(vals[0]) + 2]) if any(vals[1:]) else []


class _Collector:
    def __init__(self, table: StepTimeTable):
        self.table = table
        self._busy = False

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

        for kind, what in (("draft", "Drafter time per engine step (DFlash)"),
                           ("verify", "Target verify forward time per engine step (DFlash)")):
            counts, total, n = self.table.read(kind)
            cum, acc = [], 0.0
            for ub, c in zip([*map(str, BUCKETS), "+Inf"], counts):
                acc += c
                cum.append((ub, acc))
            h = HistogramMetricFamily(f"dflash:{kind}_time_seconds", what)
            h.add_metric([], cum, total)
            yield h
        lengths = self.table.read_lengths()
        if lengths:
            h = HistogramMetricFamily("dflash:submitted_draft_tokens",
                                      "Drafts submitted for verification per request per engine step (DFlash)")
            cum = [(str(j), float(sum(lengths[: j + 1]))) for j in range(len(lengths))]
            h.add_metric([], [*cum, ("+Inf", float(sum(lengths)))], float(sum(j * c for j, c in enumerate(lengths))))
            yield h
        if self._busy:  # collecting vLLM's counters below calls us again
            return
        self._busy = True
        try:
            from prometheus_client import REGISTRY

            drafts = accepted = 0.0
            for fam in REGISTRY.collect():
                for s in fam.samples:
                    if s.name == "vllm:spec_decode_num_drafts_total":
                        drafts += s.value
                    elif s.name == "vllm:spec_decode_num_accepted_tokens_total":
                        accepted += s.value
        finally:
            self._busy = False
        g = GaugeMetricFamily("dflash:mean_acceptance_length",
                              "Mean acceptance length tau = 1 + accepted / drafts (server lifetime)")
        g.add_metric([], tau_from_counters(accepted, drafts, empty=0.0))
        yield g


_table: StepTimeTable | None = None
_collector: _Collector | None = None


def export() -> None:
    """In the front-end (where the engine config is made and /metrics is served): a fresh table
    for the engine processes about to start, exported through a Prometheus collector."""
    global _table, _collector
    _table = StepTimeTable.create()
    envs.set(envs.STEP_TIMES, _table.path)
    try:
        from prometheus_client import REGISTRY

        if _collector is not None:
            REGISTRY.unregister(_collector)
        _collector = _Collector(_table)
        REGISTRY.register(_collector)
    except Exception:  # no prometheus_client: the metrics are an extra, serving goes on
        _collector = None


def _writer() -> StepTimeTable | None:
    """In the process running the model: the table its front-end made (inherited path)."""
    global _table
    if _table is None:
        path = envs.value(envs.STEP_TIMES)
        if not path or not os.path.exists(path):
            return None
        _table = StepTimeTable(path)
    return _table


def observe_draft_lengths(counts) -> None:
    """In the process running the model (rank 0): one step's submitted draft lengths."""
    table = _writer()
    if table is not None:
        table.observe_lengths(counts)


def observe_undrafted(n: int) -> None:
    """In the process running the model (rank 0): n requests submitted no drafts this step."""
    table = _writer()
    if table is not None:
        table.observe_undrafted(n)


def read_draft_lengths() -> list[float]:
    """Where the table is at hand (front-end, or an in-process engine): the lengths so far."""
    table = _table or _writer()
    return table.read_lengths() if table is not None else []


def timed(fn, observe, mode_of):
    """The one step timer: ``fn`` (a model-runner method) wrapped so that each call's duration
    goes to ``observe(seconds)``. ``mode_of(runner)`` says how, per call: "" (not timed), "cpu"
    (wall clock), "cuda" (a CUDA event pair, read once it has completed: never waits, the
    /metrics timers) or "cuda-sync" (wall clock to a device synchronize: the device time of a
    serialised step, the bench's split). /metrics (``install_runner_timers``) and the bench and
    tests (``driver.install_step_timers``) both wrap through it."""
    pending: list = []

    def wrapper(runner, *args, **kwargs):
        mode = mode_of(runner)
        if not mode:
            return fn(runner, *args, **kwargs)
        if mode == "cuda":
            import torch

            start = torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()
        try:
            return fn(runner, *args, **kwargs)
        finally:
            if mode == "cuda":
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                pending.append((start, end))
                while pending and pending[0][1].query():
                    a, b = pending.pop(0)
                    observe(a.elapsed_time(b) / 1e3)
                del pending[:-64]  # never grow without bound
            else:
                if mode == "cuda-sync":
                    import torch

                    torch.cuda.synchronize()
                observe(time.perf_counter() - t0)

    wrapper.__wrapped__ = fn
    return wrapper


def _runner_mode(runner) -> str:
    mode = runner.__dict__.get("_dflash_timing")
    if mode is None:  # decided once per runner: this wraps the per-step hot path
        mode = runner._dflash_timing = _timing_mode(runner)
    return mode


def _timing_mode(runner) -> str:
    """"cuda" / "cpu" where this runner should time its steps, "" where not: not our proposer,
    not tensor-parallel rank 0, or no table from a front-end."""
    from .proposers.dflash import DFlashProposer

    if not isinstance(getattr(runner, "drafter", None), DFlashProposer) or _writer() is None:
        return ""
    try:
        from vllm.distributed import get_tensor_model_parallel_rank

        if get_tensor_model_parallel_rank() != 0:
            return ""
    except Exception:  # no distributed state (single process)
        pass
    return "cuda" if runner.device.type == "cuda" else "cpu"


def install_runner_timers(runner_module) -> None:
    cls = runner_module.GPUModelRunner
    if getattr(cls.execute_model, "_dflash_timed", False):
        return
    cls.execute_model = timed(cls.execute_model, lambda sec: _table.observe("verify", sec), _runner_mode)
    cls.propose_draft_token_ids = timed(cls.propose_draft_token_ids, lambda sec: _table.observe("draft", sec),
                                        _runner_mode)
    cls.execute_model._dflash_timed = True
