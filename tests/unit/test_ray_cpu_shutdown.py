"""The CPU Ray executor's worker monitor (fixes/ray_cpu.py): workers that ended because
ray.shutdown() is in progress are not a failure. vLLM's monitor shut the executor down from its
thread then, releasing Ray handles mid-shutdown, and Ray ended the process with exit status 1
(1 run in 6 of the teardown in tests/e2e/test_tensor_parallel.py)."""

import threading

import pytest

pytestmark = pytest.mark.unit


class _Handle:
    def __init__(self, rank):
        self.rank, self.actor, self.run_ref = rank, f"actor{rank}", f"run{rank}"


def _monitor_once(monkeypatch, ray_up_after_wait: bool):
    """One pass of the monitor: ray.wait reports worker 1's run() ended; Ray is still up, or
    (ray.shutdown() in progress: it disconnects the driver before ending its actors) not."""
    import ray

    from dflash_vllm.fixes.ray_cpu import CpuRayExecutor

    up = [True]
    killed, failed = [], []

    def wait(refs, num_returns, timeout):
        up[0] = ray_up_after_wait
        return ["run1"], []

    monkeypatch.setattr(ray, "wait", wait)
    monkeypatch.setattr(ray, "is_initialized", lambda: up[0])
    monkeypatch.setattr(ray, "kill", lambda actor: killed.append(actor))
    ex = object.__new__(CpuRayExecutor)  # no Ray: only what the monitor and shutdown read
    ex.shutdown_lock = threading.Lock()
    ex.shutting_down = False
    ex.ray_worker_handles = [_Handle(0), _Handle(1)]
    ex.failure_callback = lambda: failed.append(True)
    ex.start_worker_monitor()
    ex._monitor_thread.join(10)
    assert not ex._monitor_thread.is_alive()
    return ex, killed, failed


def test_a_worker_that_died_while_ray_is_up_fails_the_executor(monkeypatch):
    ex, killed, failed = _monitor_once(monkeypatch, ray_up_after_wait=True)
    assert ex.is_failed and ex.shutting_down and killed == ["actor0", "actor1"] and failed == [True]


def test_workers_ended_by_a_ray_shutdown_are_not_a_failure(monkeypatch):
    ex, killed, failed = _monitor_once(monkeypatch, ray_up_after_wait=False)
    assert not getattr(ex, "is_failed", False) and not ex.shutting_down and killed == [] and failed == []
    assert len(ex.ray_worker_handles) == 2  # no Ray handle released by the monitor's thread
