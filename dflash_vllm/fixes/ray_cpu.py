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
ray``; nothing changes for CUDA or for the multiprocessing executor. Importing this module (the
driver does; so does every Ray actor, which unpickles ``CpuRayWorkerProc`` by reference) sets
(1); the subclasses below handle (2) and (3).
"""

from __future__ import annotations

from vllm.platforms.cpu import CpuPlatform
from vllm.v1.executor import ray_executor_v2 as _rx

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

    def _init_executor(self) -> None:
        original = _rx.RayWorkerProc
        _rx.RayWorkerProc = CpuRayWorkerProc  # the name the base class spawns actors from
        try:
            super()._init_executor()
        finally:
            _rx.RayWorkerProc = original
