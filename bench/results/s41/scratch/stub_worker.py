"""Session 41 (issue #10): the bench's engine worker (dflash_vllm.bench.worker), with the proposer's
drafting hook replaced, when the method's env has S41_STUB=1, by one that does nothing but hand the
runner empty draft lists (no plan, no queued context K/V, no bookkeeping). Only for K = 0 pinned:
nothing ever drafts, so the output is still exactly the target's. Used by stub_bench.py."""
import json
import sys


def main():
    cfg = json.loads(sys.argv[1])
    old = cfg.get("env", {}).get("S41_CODE")
    if old:  # another checkout's dflash_vllm (e.g. a git worktree of the commit before a change)
        sys.path.insert(0, old)
    if cfg.get("env", {}).get("S41_STUB") == "1":
        from dflash_vllm.proposers.dflash import DFlashProposer

        def stub(self, propose_ids, scheduler_output, *args):
            self._skipped_step = True  # _take_drafts: None, as a runner without drafts
            return [[] for _ in range(self._runner.input_batch.num_reqs)]

        DFlashProposer._plan_then_propose = stub
    import dflash_vllm
    from dflash_vllm.bench import worker

    print(f"stub_worker: dflash_vllm from {dflash_vllm.__file__}", file=sys.stderr, flush=True)

    sys.exit(worker.main())


if __name__ == "__main__":
    main()
