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
