"""Session 48 (issue #10): the bench's engine worker with the proposer's dormant step cut down,
to bound what the weak cells could gain (by the method's env S48_VARIANT):
  noqueue : adaptive as shipped, but a step whose plan is no drafts queues no context (the
            sentinels' drafter context gets holes: an upper bound on the queue's cost, not a
            policy to ship; probes then draft from holes);
  stub    : the hook does nothing but hand the runner empty lists (never drafts: s41's stub).
Output stays the target's in every variant (drafts are verified; the stub drafts nothing)."""
import json
import sys
import time


def main():
    cfg = json.loads(sys.argv[1])
    variant = cfg.get("env", {}).get("S48_VARIANT")
    from dflash_vllm.proposers import dflash as P

    if variant == "stub":
        def stub(self, propose_ids, scheduler_output, *args):
            self._skipped_step = True
            return [[] for _ in range(self._runner.input_batch.num_reqs)]
        P.DFlashProposer._plan_then_propose = stub
    elif variant == "noqueue":
        shipped = P.DFlashProposer._plan_then_propose

        def noqueue(self, propose_ids, scheduler_output, sampled_token_ids, sampling_metadata, *args):
            runner = self._runner
            self._skipped_step, self._plan_start = False, None
            queue = self._ctx_queue
            queue.end(scheduler_output.finished_req_ids, scheduler_output.preempted_req_ids)
            if queue.block_size is not None:
                if self._kv_group is None:
                    self._kv_group = self._find_kv_group(runner)
                if queue.ledger:
                    queue.schedule(scheduler_output.scheduled_new_reqs, scheduler_output.scheduled_cached_reqs,
                                   self._kv_group)
            if scheduler_output.scheduled_new_reqs and self.policy.closes_door(runner.input_batch.num_reqs):
                self._close_door(scheduler_output.scheduled_new_reqs)
            k_max = scheduler_output.num_spec_tokens_to_schedule
            n = scheduler_output.total_num_scheduled_tokens
            num_reqs = runner.input_batch.num_reqs
            if k_max and n and num_reqs:
                q = self._plan(num_reqs, n, k_max, sampling_metadata)
                if q == 0:
                    self.num_skipped_forwards += 1
                    self._skipped_step = True
                    self._call_end = time.perf_counter()
                    self._overhead = self._call_end - self._plan_start
                    return [[] for _ in range(num_reqs)]
                self._planned_q = q
            # drafting (or nothing scheduled): as shipped, minus the bookkeeping done above
            self._flush_s = 0.0
            t0 = time.perf_counter()
            self._overhead = t0 - self._plan_start if self._plan_start is not None else 0.0
            try:
                return propose_ids(scheduler_output, sampled_token_ids, sampling_metadata, *args)
            finally:
                self._call_end = time.perf_counter()
                t = self._draft_timing
                if t is not None and t[0] == "cpu" and t[1] >= t0:
                    self._draft_timing = ("cpu", t0 + self._flush_s, self._call_end, *t[3:])
        P.DFlashProposer._plan_then_propose = noqueue
    from dflash_vllm.bench import worker

    print(f"bound_worker: variant {variant}", file=sys.stderr, flush=True)
    sys.exit(worker.main())


if __name__ == "__main__":
    main()
