"""Session 42 (issue #10): the bench's engine worker with the proposer's K = 0 branch cut in two,
to tell which half makes a pinned K = 0 step cost more than a plain one (session 41 showed the
whole hook does, s41/k0-stub.json). By the method's env S42_VARIANT:
  stub      : the hook does nothing but hand the runner empty lists (s41's stub);
  noplan    : no plan (q = 0 at once), the context queued as shipped;
  noqueue   : the plan as shipped, nothing queued (no queue bookkeeping, no copies).
Only for K = 0 pinned: nothing ever drafts, so every variant's output is the target's. With
S42_CODE=DIR in the method's env, the worker imports dflash_vllm from the checkout DIR instead
(old against new in one run: variant_bench.py ab)."""
import json
import sys


def main():
    cfg = json.loads(sys.argv[1])
    variant = cfg.get("env", {}).get("S42_VARIANT")
    old = cfg.get("env", {}).get("S42_CODE")
    if old:  # another checkout's dflash_vllm (a git worktree of the commit before a change)
        sys.path.insert(0, old)
    from dflash_vllm.proposers import dflash as P

    if variant == "stub":
        def stub(self, propose_ids, scheduler_output, *args):
            self._skipped_step = True
            return [[] for _ in range(self._runner.input_batch.num_reqs)]
        P.DFlashProposer._plan_then_propose = stub
    elif variant == "noplan":
        P.DFlashProposer._plan = lambda self, num_reqs, n, k_max, sm: setattr(self, "_plan_start", __import__("time").perf_counter()) or 0
    elif variant == "noqueue":
        orig = P.DFlashProposer._plan_then_propose

        def noqueue(self, propose_ids, scheduler_output, sampled_token_ids, sampling_metadata, *args):
            runner = self._runner
            self._skipped_step = True
            self._plan(runner.input_batch.num_reqs, scheduler_output.total_num_scheduled_tokens,
                       scheduler_output.num_spec_tokens_to_schedule, sampling_metadata)
            return [[] for _ in range(runner.input_batch.num_reqs)]
        P.DFlashProposer._plan_then_propose = noqueue
    from dflash_vllm.bench import worker

    import dflash_vllm

    print(f"bisect_worker: variant {variant}, dflash_vllm from {dflash_vllm.__file__}", file=sys.stderr, flush=True)
    sys.exit(worker.main())


if __name__ == "__main__":
    main()
