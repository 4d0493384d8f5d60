"""The one step timer (metrics.timed) behind /metrics and the bench's step split."""

import time

import pytest

from dflash_vllm.metrics import timed

pytestmark = pytest.mark.unit


class Runner:
    def __init__(self, mode):
        self.mode = mode

    def step(self, x, pause=0.0):
        time.sleep(pause)
        return x + 1


def test_times_each_call_where_the_mode_says():
    seen = []
    Runner.timed_step = timed(Runner.step, seen.append, lambda r: r.mode)
    assert Runner("cpu").timed_step(1, pause=0.01) == 2 and len(seen) == 1 and 0.009 < seen[0] < 1.0
    assert Runner("").timed_step(1) == 2 and len(seen) == 1  # not timed: nothing observed
    assert Runner.timed_step.__wrapped__ is Runner.step


def test_exceptions_are_timed_and_raised():
    seen = []
    boom = timed(lambda r: 1 / 0, seen.append, lambda r: "cpu")
    with pytest.raises(ZeroDivisionError):
        boom(Runner("cpu"))
    assert len(seen) == 1


def test_split_timer_sums_each_part_per_step_and_leaves_results_and_errors_alone():
    """`bench profile ... --split`: a part's wall-clock time per engine step, nested parts each
    in full, parts never called left out, exceptions raised as they were."""
    from dflash_vllm.bench.profile import SplitTimer

    class Engine:
        def inner(self, x):
            time.sleep(0.01)
            return x * 2

        def outer(self, x):
            return self.inner(x) + 1

        def never(self):
            return None

        def fails(self):
            raise KeyError("x")

    e, timer = Engine(), SplitTimer()
    for name in ("inner", "outer", "never", "fails"):
        timer.wrap(e, name)
    assert e.outer(3) == 7 and e.outer(1) == 3
    with pytest.raises(KeyError):
        e.fails()
    parts = timer.per_step(2)  # two "steps"
    assert set(parts) == {"Engine.inner", "Engine.outer", "Engine.fails"}
    assert 9.0 < parts["Engine.inner"] < 500 and parts["Engine.outer"] >= parts["Engine.inner"]
    assert timer.calls["Engine.inner"] == 2 and timer.calls["Engine.fails"] == 1
    timer.reset()
    assert timer.per_step(1) == {}
