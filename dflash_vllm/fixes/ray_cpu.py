"""Ray tensor parallel on vLLM's CPU platform (vLLM 0.32 refuses it as shipped).

vLLM's Ray executor (RayExecutorV2: Ray actors as workers, vLLM's shared-memory message queues
as the control plane, torch.distributed (gloo on CPU) as the data plane) is device-agnostic
except in three places, all keyed on ``current_platform.ray_device_key``, which is empty for
CPU ("current platform cpu does not support ray"):

1. placement groups: one bundle per worker holding one unit of the device resource. For CPU
   that resource is Ray's own ``CPU``: each worker reserves one CPU of its node;
2. actor options: GPUs are requested with ``num_gpus``, other devices as custom resources; Ray
   forbids ``CPU`` there, and the bundle already holds the CPU, so a CPU worker asks for none;
3. device discovery: a worker asks Ray which accelerator ids it got, for CUDA_VISIBLE_DEVICES
   bookkeeping; a CPU worker has none (its cores come from VLLM_CPU_OMP_THREADS_BIND, indexed
   by local rank, as with the multiprocessing executor).

Installed by the plugin only on the CPU platform, only for ``--distributed-executor-backend
ray``; nothing changes for CUDA or for the multiprocessing executor. The executor also carries its
own copy of vLLM's worker monitor (patch ``ray-cpu-monitor``): a ``ray.shutdown()`` is not a
worker failure. Importing this module (the
driver does; so does every Ray actor, which unpickles ``CpuRayWorkerProc`` by reference) sets
(1); the subclasses below handle (2) and (3).
"""

from __future__ import annotations

import threading
import weakref

from vllm.logger import init_logger
from vllm.platforms.cpu import CpuPlatform
from vllm.v1.executor import ray_executor_v2 as _rx

logger = init_logger(__name__)

CpuPlatform.ray_device_key = "CPU"


class CpuRayWorkerProc(_rx.RayWorkerProc):
    def get_node_and_physical_gpu_ids(self) -> tuple[str, list[int]]:
        import ray

        return ray.get_runtime_context().get_node_id(), []


class CpuRayExecutor(_rx.RayExecutorV2):
    @staticmethod
    def _get_actor_resource_kwargs() -> dict:
        return {"num_gpus": 0}

    def shutdown(self) -> None:
        # At interpreter exit Ray's own atexit hook may have ended the session (and its actors)
        # before this executor's finalizer runs; ray.kill would then start a fresh local Ray
        # just to fail on the stale handles (and the process has been seen to die with SIGSEGV).
        import ray

        if not ray.is_initialized():
            self.ray_worker_handles = []
        super().shutdown()

    def start_worker_monitor(self, inline=False) -> None:
        """vLLM's worker monitor (``RayExecutorV2.start_worker_monitor``, vLLM 0.32) with one
        check more: workers that ended because Ray itself is shutting down (``ray.shutdown()``
        disconnects this driver first, then ends the actors it owns) are not a failure. vLLM's
        monitor took them for one and shut the executor down from its thread, releasing Ray
        handles while the shutdown was in progress, and Ray ended the whole process with exit
        status 1 ("The core worker has already been shutdown"): 1 run in 6 of the teardown in
        tests/e2e/test_tensor_parallel.py (session 30, also one CI run)."""
        import ray

        from .. import patches

        patches.require("ray-cpu-monitor")  # the method this copies is still vLLM's
        run_refs = [h.run_ref for h in self.ray_worker_handles if h.run_ref is not None]
        if not run_refs:
            raise RuntimeError("Ray workers have not started successfully.")
        self_ref = weakref.ref(self)
        ref_to_rank = {h.run_ref: h.rank for h in self.ray_worker_handles if h.run_ref is not None}

        def _should_stop() -> bool:
            executor = self_ref()
            return not executor or executor.shutting_down

        def monitor_workers():
            while not _should_stop() and ray.is_initialized():
                try:
                    done, _ = ray.wait(run_refs, num_returns=1, timeout=5.0)
                except Exception:
                    logger.exception("RayWorkerMonitor: unexpected error, exiting monitor thread")
                    return
                if not ray.is_initialized():  # the check added: Ray is shutting down
                    return
                if not done or _should_stop():
                    continue
                dead_ranks = [ref_to_rank[r] for r in done]
                executor = self_ref()
                if not executor:
                    return
                executor.is_failed = True
                logger.error("RayWorkerProc rank=%s died unexpectedly, shutting down executor.", dead_ranks)
                executor.shutdown()
                if executor.failure_callback is not None:
                    callback = executor.failure_callback
                    executor.failure_callback = None
                    callback()
                return

        t = threading.Thread(target=monitor_workers, daemon=True, name="RayWorkerMonitor")
        t.start()
        self._monitor_thread = t

    def _init_executor(self) -> None:
        original = _rx.RayWorkerProc
        _rx.RayWorkerProc = CpuRayWorkerProc  # the name the base class spawns actors from
        try:
            super()._init_executor()
        finally:
            _rx.RayWorkerProc = original
