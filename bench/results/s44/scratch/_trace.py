"""Session 44 scratch: what the in-process scripts here share. ``warm_engine``: an engine (s43's
``_engine.engine_at``, 160 tokens a request) after its warm-up third; ``rotation_engine``: an
adaptive engine for the full check's rotation of cells; ``count_steps``: a counter of the engine's
steps; ``trace_plans``: the policy's plans, each drafted one with why it drafted. (Session 45's
scratch uses them too.)"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "s43", "scratch"))
from _engine import engine_at  # noqa: E402


def warm_engine(fixed_k, concurrency: int, default_set: str):
    """(engine, runner, requests, n) as ``engine_at``, the first n requests already run."""
    from dflash_vllm.driver import drive
    engine, runner, reqs, n = engine_at(fixed_k, concurrency, default_set)
    for r in reqs:
        r["max_tokens"] = 160
    drive(engine, reqs[:n], concurrency=concurrency, id_prefix="warm-")
    return engine, runner, reqs, n


def rotation_engine():
    """(engine, runner, reqs): an adaptive in-process engine of the demo pair at up to 64
    requests, and ``reqs(prompt_set, n)``: n requests of that set, 160 tokens at most, stopping
    at EOS (the bench's cells)."""
    from transformers import AutoTokenizer
    from dflash_vllm import envs, paths
    from dflash_vllm.bench import profile as P
    from dflash_vllm.prompts import prompt_set
    envs.set(envs.FIXED_K, "adaptive")
    llm = P._engine(P._spec(), 64)
    tok = AutoTokenizer.from_pretrained(str(paths.DEMO_TARGET))
    eos = [tok.eos_token_id]

    def reqs(s, n):
        ids = prompt_set(s, tok, n)[1]
        return [{"prompt_token_ids": ids[i % len(ids)], "max_tokens": 160, "stop_token_ids": eos, "ignore_eos": False}
                for i in range(n)]
    engine = llm.llm_engine
    return engine, engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner, reqs


def count_steps(engine) -> list:
    """A one-element list holding the number of engine steps taken from now on."""
    step, orig = [0], engine.step

    def counted():
        out = orig()
        step[0] += 1
        return out
    engine.step = counted
    return step


def trace_plans(pol, on_plan) -> None:
    """Wrap ``pol.plan``: ``on_plan(req_ids, k, q, why)`` after each plan. ``why`` (drafted plans
    only, else ""): "surprise" or "look" (a probe at once after an unlikely run, or its second
    look), "due" (a probe the spacing brought), "optimum drafts" (the optimum itself drafts),
    "other"."""
    orig = pol.plan

    def plan(req_ids, *a, **kw):
        acc = pol.acceptance
        why = "surprise" if acc.surprised else (
            "look" if pol._look_again is not None and acc.verified_steps > pol._look_again else "")
        o = pol.optimum
        due = o is not None and pol._probe_due(o, num_reqs=len(req_ids))
        k, q = orig(req_ids, *a, **kw)
        if q:
            why = why or ("due" if due and pol.dormant else ("optimum drafts" if not pol.dormant else "other"))
        on_plan(req_ids, k, q, why if q else "")
        return k, q
    pol.plan = plan
