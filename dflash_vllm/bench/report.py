"""Turn raw closed-loop runs into the numbers a person reads: per-cell summaries, the paper-shaped
tables, `compare`, and the plots.

Notation follows eq. (2)-(5) of the paper notes: tau = 1 + sum_k P(A >= k) (A = accepted drafts
per verify step); per step T_d (drafting), T_v (target verify forward), T_o (the rest: scheduling,
sampling, rejection, cache bookkeeping); L_t = the no-speculation step time at the same
concurrency; predicted speed-up S = tau * L_t / (T_d + T_v + T_o).
"""

from __future__ import annotations

import json
import math
import statistics

from ..acceptance import histogram, prefix_survival, tau


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))
    return xs[i]


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1e3, 3)


def _mean_k(hist: list[int]) -> float | None:
    """Mean of a histogram of submitted draft lengths (hist[j]: rows that submitted j)."""
    n = sum(hist)
    return round(sum(j * c for j, c in enumerate(hist)) / n, 3) if n else None


def _geomean(xs) -> float:
    return math.exp(statistics.mean(math.log(x) for x in xs))


def summarize(runs: list[dict], k: int | None) -> dict:
    """Pool one or more runs of the same cell and method."""
    steps = [s for r in runs for s in r["steps"]]
    outputs = [o for r in runs for o in r["outputs"]]
    wall = sum(r["wall_s"] for r in runs)
    tokens = sum(s["new_tokens"] for s in steps)
    acc = [a for o in outputs for a in o["accepted_per_step"]]
    n = max(1, len(steps))
    t_v = sum(s.get("verify_s", 0.0) for s in steps) / n
    t_d = sum(s.get("draft_s", 0.0) for s in steps) / n
    t_step = sum(s["seconds"] for s in steps) / n
    tpot = [(o["e2e_s"] - o["ttft_s"]) / (len(o["token_ids"]) - 1) for o in outputs if len(o["token_ids"]) > 1]
    itl = [x for r in runs for x in r["itl_s"]]
    ttft = [o["ttft_s"] for o in outputs]
    out = {
        "num_requests": len(outputs),
        "output_tokens": tokens,
        "mean_output_len": round(sum(len(o["token_ids"]) for o in outputs) / max(1, len(outputs)), 1),
        "wall_s": round(wall, 3),
        "output_tokens_per_s": round(tokens / wall, 2) if wall > 0 else None,
        # one value per repeat (adjacent in time to the other methods' same repeat): the ratio's noise
        "tokens_per_s_per_repeat": [round(sum(s["new_tokens"] for s in r["steps"]) / r["wall_s"], 2)
                                    for r in runs if r["wall_s"] > 0],
        "num_steps": len(steps),
        "mean_running": round(sum(s["running"] for s in steps) / n, 2),
        "tokens_per_step": round(tokens / n, 3),
        "step_ms": {"T_v": _ms(t_v), "T_d": _ms(t_d), "T_o": _ms(t_step - t_v - t_d), "total": _ms(t_step)},
        "latency_ms": {"ttft_p50": _ms(_pct(ttft, 50)), "ttft_p99": _ms(_pct(ttft, 99)),
                       "itl_p50": _ms(_pct(itl, 50)), "itl_p99": _ms(_pct(itl, 99)),
                       "tpot_p50": _ms(_pct(tpot, 50)), "tpot_p99": _ms(_pct(tpot, 99))},
    }
    gcs = [r["gc"] for r in runs if r.get("gc")]
    if gcs:  # garbage collection inside the runs (bench worker's GcClock): ms per engine step, full collections
        out["gc"] = {"ms_per_step": _ms(sum(g["s"] for g in gcs) / n),
                     "collections": [sum(g["collections"][i] for g in gcs) for i in range(3)]}
    sub = [r["submitted_hist"] for r in runs if r.get("submitted_hist")]
    if sub:  # drafts submitted per decoding request per step, 0 included (the adaptive policy's choice)
        width = max(len(h) for h in sub)
        hist = [sum(h[j] for h in sub if j < len(h)) for j in range(width)]
        out["submitted_hist"] = hist
        out["mean_submitted_k"] = _mean_k(hist)
        # per repeat too: a cell's pooled mean weighs each repeat by its steps, so one repeat that
        # stopped drafting (more steps) can hide two that drafted deep
        out["mean_submitted_k_per_repeat"] = [_mean_k(h) for h in sub]
    if k and acc:
        out.update({
            "tau": round(tau(acc), 3),
            "verify_steps": len(acc),
            "accepted_hist": histogram(acc, k),  # hist[j] = verify steps that accepted exactly j drafts
            "prefix_survival": [round(x, 4) for x in prefix_survival(acc, k)],  # P(A >= j), j = 1..K (eq. 2)
        })
    return out


def add_ratios(cells: list[dict]) -> None:
    """Speed-up over no speculation in the same run, and eq. (4)'s account of it."""
    base = {(c["prompt_set"], c["concurrency"]): c for c in cells if c["method"] == "none"}
    for c in cells:
        b = base.get((c["prompt_set"], c["concurrency"]))
        if b is None or c["method"] == "none":
            continue
        if b.get("output_tokens_per_s") and c.get("output_tokens_per_s"):
            c["speedup"] = round(c["output_tokens_per_s"] / b["output_tokens_per_s"], 3)
        lt = b["step_ms"]["total"]
        if lt and c.get("tau"):
            s = c["step_ms"]
            c["eq4"] = {"L_t_ms": lt, "r_d": round(s["T_d"] / lt, 3), "r_v": round(s["T_v"] / lt, 3),
                        "r_o": round(s["T_o"] / lt, 3), "predicted_speedup": round(c["tau"] * lt / s["total"], 3)}


def _fmt(x, spec=".2f", dash="-"):
    return dash if x is None else format(x, spec)


def _cell(cells, method, ps, conc):
    for c in cells:
        if c["method"] == method and c["prompt_set"] == ps and c["concurrency"] == conc:
            return c
    return None


def tables(result: dict) -> str:
    """Table 1-style grid (speed-up / tau per prompt set at the lowest concurrency), Table 3-style
    concurrency sweep, and the time split, as markdown."""
    cells = result["cells"]
    methods = [m for m in result["methods"] if m != "none"]
    sets = list(dict.fromkeys(c["prompt_set"] for c in cells))
    concs = sorted({c["concurrency"] for c in cells})
    cfg = result.get("config", {})
    lines = [f"target {cfg.get('target')}, drafter {cfg.get('drafter')}, K={cfg.get('k')}; temperature "
             f"{cfg.get('temperature')}; up to {cfg.get('max_tokens')} tokens per request"
             f"{' (EOS ignored: fixed length)' if cfg.get('ignore_eos') else ' (stop at EOS)'}; "
             f"provenance {result.get('provenance', {}).get('git_commit', '?')[:12]}\n"]
    c0 = concs[0]
    grid_sets = [ps for ps in sets if _cell(cells, "none", ps, c0)]
    lines.append(f"Speed-up over no speculation / tau, concurrency {c0}, greedy unless stated (Table 1 style)\n")
    lines.append("| method | " + " | ".join(grid_sets) + " | mean |")
    lines.append("|---" * (len(grid_sets) + 2) + "|")
    for m in methods:
        row, sps, taus = [], [], []
        for ps in grid_sets:
            c = _cell(cells, m, ps, c0)
            if c is None:
                row.append("-")
                continue
            sps.append(c.get("speedup"))
            taus.append(c.get("tau"))
            row.append(f"{_fmt(c.get('speedup'))}x / {_fmt(c.get('tau'))}")
        sp = [x for x in sps if x]
        ta = [x for x in taus if x]
        mean = f"{statistics.mean(sp):.2f}x / {_fmt(statistics.mean(ta) if ta else None)}" if sp else "-"
        lines.append(f"| {m} | " + " | ".join(row) + f" | {mean} |")
    for ps in sets:
        cs = sorted({c["concurrency"] for c in cells if c["prompt_set"] == ps})
        if len(cs) < 2:
            continue
        lines.append(f"\nConcurrency sweep, prompt set `{ps}` (Table 3 style): output tok/s, speed-up, tau\n")
        lines.append("| concurrency | " + " | ".join(["none tok/s", *[f"{m} tok/s / speed-up / tau" for m in methods]]) + " |")
        lines.append("|---" * (len(methods) + 2) + "|")
        for conc in cs:
            b = _cell(cells, "none", ps, conc)
            row = [_fmt(b and b.get("output_tokens_per_s"), ".0f")]
            for m in methods:
                c = _cell(cells, m, ps, conc)
                row.append("-" if c is None else
                           f"{_fmt(c.get('output_tokens_per_s'), '.0f')} / {_fmt(c.get('speedup'))}x / {_fmt(c.get('tau'))}")
            lines.append(f"| {conc} | " + " | ".join(row) + " |")
        lines.append(f"\nWhere a step's time goes, `{ps}` (eq. 4; ms per engine step; r = T / L_t; "
                     "S_pred = tau L_t / (T_d+T_v+T_o); latency p50/p99 in ms)\n")
        lines.append("| concurrency | method | T_v | T_d | T_o | r_v + r_d + r_o | S_pred | S | TTFT p50/p99 | ITL p50/p99 |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for conc in cs:
            for m in ["none", *methods]:
                c = _cell(cells, m, ps, conc)
                if c is None:
                    continue
                s, e, lat = c["step_ms"], c.get("eq4", {}), c["latency_ms"]
                rsum = e and round(e["r_v"] + e["r_d"] + e["r_o"], 2)
                lines.append(f"| {conc} | {m} | {_fmt(s['T_v'])} | {_fmt(s['T_d'])} | {_fmt(s['T_o'])} | {_fmt(rsum or None)} | "
                             f"{_fmt(e.get('predicted_speedup'))} | {_fmt(c.get('speedup'))} | "
                             f"{_fmt(lat['ttft_p50'], '.1f')}/{_fmt(lat['ttft_p99'], '.1f')} | "
                             f"{_fmt(lat['itl_p50'], '.1f')}/{_fmt(lat['itl_p99'], '.1f')} |")
    lines.extend(adaptive_tables(result))
    mem = {m: v.get("memory") for m, v in result["methods"].items() if v.get("memory")}
    if mem:
        lines.append("\nMemory (MiB): drafter weights not shared with the target; KV cache held by drafter layers / target layers\n")
        lines.append("| method | drafter weights | drafter KV | target KV |")
        lines.append("|---|---|---|---|")
        for m, v in mem.items():
            lines.append(f"| {m} | {v['drafter_weight_bytes'] / 2**20:.2f} | {v['drafter_kv_bytes'] / 2**20:.1f} | "
                         f"{v['target_kv_bytes'] / 2**20:.1f} |")
    bad = [c for c in cells if c.get("identical_to_no_spec") is not None and c["identical_to_no_spec"] < 1]
    if bad:
        lines.append("\nWARNING: outputs differ from no speculation (greedy) in: " +
                     ", ".join(f"{c['method']}@{c['prompt_set']}/c{c['concurrency']} ({c['identical_to_no_spec']:.2f})" for c in bad))
    return "\n".join(lines)


def _fixed_k(method: str) -> int | None:
    # (a replica, ``ours@k=N#2``, is not one more candidate for the best fixed K)
    return int(method.split("=", 1)[1]) if method.startswith("ours@k=") and "#" not in method else None


# One-sided 95 % Student t quantiles by degrees of freedom (repeats - 1).
_T95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833}


def ratio_verdict(a: list[float], b: list[float], goal: float) -> dict | None:
    """Is a / b >= goal, from paired repeats (repeat r of a and of b ran back to back)?

    Works on log ratios: their mean m and standard error se give a 90 % interval
    m -/+ t se (one-sided 95 % each way). "meets": the whole interval is at or above the goal;
    "misses": all of it below; "undecided": the noise of these repeats cannot tell. None with
    fewer than 2 paired repeats. On this 2-core VM one repeat of a cell moves ~17 % (the
    log-ratio sd of K = 0 against no speculation, the same computation), so a 3 % goal per cell
    needs many repeats to decide."""
    n = min(len(a), len(b))
    if n < 2 or any(x <= 0 for x in a[:n] + b[:n]):
        return None
    logs = [math.log(x / y) for x, y in zip(a[:n], b[:n])]
    m, se = statistics.mean(logs), statistics.stdev(logs) / math.sqrt(n)
    t = _T95.get(n - 1, 1.645)
    lo, hi = math.exp(m - t * se), math.exp(m + t * se)
    verdict = "meets" if lo >= goal else "misses" if hi < goal else "undecided"
    return {"ratio": round(math.exp(m), 3), "interval_90": [round(lo, 3), round(hi, 3)], "verdict": verdict}


def vs_best_held_out(ours: list[float], fixed: dict[str, list[float]]) -> float | None:
    """Ours against the fixed K one would pick from measurements: for each repeat r, the fixed
    K with the best geometric mean over the other repeats, scored on repeat r alone; the
    geometric mean of the ratios. Unlike "the best fixed K of the cell" (the highest of several
    noisy means, measured on the same repeats it is chosen by), this is not biased upward by
    the choice: four methods that are equally fast, measured with this VM's ~17 % noise per
    repeat, put the in-sample best ~5-10 % above each of them. None with fewer than 2 repeats."""
    n = min([len(ours)] + [len(v) for v in fixed.values()]) if fixed else 0
    if n < 2 or any(x <= 0 for v in [ours, *fixed.values()] for x in v[:n]):
        return None
    ratios = []
    for r in range(n):
        m = max(fixed, key=lambda k: sum(math.log(fixed[k][i]) for i in range(n) if i != r))
        ratios.append(ours[r] / fixed[m][r])
    return round(_geomean(ratios), 3)


def adaptive_check(result: dict) -> list[dict]:
    """Per cell where `ours@adaptive` and `none` ran: adaptive / none and adaptive / the best fixed-K
    `ours@k=N` of the same cell, against the goals 0.97 and 0.95 (pooled point estimates, and
    `ratio_verdict` from the paired repeats where the result has them), and adaptive / the fixed
    K picked on the other repeats (`vs_best_held_out`: free of the choice's upward bias)."""
    cells = result["cells"]
    rows = []
    for c in cells:
        if c["method"] != "ours@adaptive":
            continue
        ps, conc = c["prompt_set"], c["concurrency"]
        b = _cell(cells, "none", ps, conc)
        fixed = [x for x in cells if x["prompt_set"] == ps and x["concurrency"] == conc and x.get("output_tokens_per_s")
                 and (_fixed_k(x["method"]) is not None or x["method"] == "ours")]  # ours: K = --k
        best = max(fixed, key=lambda x: x["output_tokens_per_s"], default=None)
        ours = c.get("output_tokens_per_s")
        vs_none = round(ours / b["output_tokens_per_s"], 3) if ours and b and b.get("output_tokens_per_s") else None
        vs_best = round(ours / best["output_tokens_per_s"], 3) if ours and best else None
        per = c.get("tokens_per_s_per_repeat") or []
        rows.append({"prompt_set": ps, "concurrency": conc, "vs_none": vs_none, "best_fixed": best and best["method"],
                     "vs_best_fixed": vs_best, "mean_submitted_k": c.get("mean_submitted_k"),
                     "ok": (vs_none is None or vs_none >= 0.97) and (vs_best is None or vs_best >= 0.95),
                     "vs_none_repeats": b and ratio_verdict(per, b.get("tokens_per_s_per_repeat") or [], 0.97),
                     "vs_best_fixed_repeats": best and ratio_verdict(per, best.get("tokens_per_s_per_repeat") or [], 0.95),
                     "vs_best_fixed_held_out": vs_best_held_out(
                         per, {x["method"]: x.get("tokens_per_s_per_repeat") or [] for x in fixed})})
    return rows


def replica_control(result: dict, goal: float = 0.97) -> dict | None:
    """The A/A control of a run with replicas of ``none`` (``none#2``, ...: the same configuration
    in another engine process, run in the same rotation): each replica over ``none`` per cell,
    which is what the per-cell goal reads for a method exactly as fast as no speculation. How
    many of those cells fall below ``goal``, and their range, say how far this run's per-cell
    ratios can be trusted: in session 41 (3 repeats, 16 requests per cell run) a replica read
    0.83-1.27 of ``none`` and fell below 0.97 in 14 of 56 cells; with 64 requests, 8 of 14 weak
    cells (``bench/results/s41``). None without replicas."""
    cells = result["cells"]
    reps = sorted({c["method"] for c in cells if c["method"].startswith("none#")})
    ratios = []
    for c in cells:
        if c["method"] in reps and c.get("output_tokens_per_s"):
            b = _cell(cells, "none", c["prompt_set"], c["concurrency"])
            if b and b.get("output_tokens_per_s"):
                ratios.append(c["output_tokens_per_s"] / b["output_tokens_per_s"])
    if not ratios:
        return None
    return {"replicas": reps, "goal": goal, "cells": len(ratios), "below_goal": sum(r < goal for r in ratios),
            "range": [round(min(ratios), 3), round(max(ratios), 3)], "geomean": round(_geomean(ratios), 3)}


def adaptive_tables(result: dict) -> list[str]:
    cells = result["cells"]
    lines = []
    with_hist = [c for c in cells if c.get("submitted_hist")]
    if with_hist:
        lines.append("\nSubmitted drafts per request per step (0 included): mean K and histogram counts j = 0..K\n")
        lines.append("| prompt set | concurrency | method | mean K | histogram |")
        lines.append("|---|---|---|---|---|")
        for c in with_hist:
            lines.append(f"| {c['prompt_set']} | {c['concurrency']} | {c['method']} | {_fmt(c.get('mean_submitted_k'))} | "
                         + " ".join(str(x) for x in c["submitted_hist"]) + " |")
    rows = adaptive_check(result)
    if rows:
        lines.append("\nAdaptive drafting vs no speculation (goal >= 0.97) and vs the best fixed K of the cell (goal >= 0.95)\n")
        lines.append("| prompt set | concurrency | adaptive / none | best fixed K | adaptive / best fixed | mean K | ok "
                     "| vs none, 90 % interval over repeats | vs best fixed, 90 % interval "
                     "| vs the fixed K picked on the other repeats |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")

        def iv(v):
            return f"{v['interval_90'][0]:.2f}-{v['interval_90'][1]:.2f} {v['verdict']}" if v else "-"

        for r in rows:
            lines.append(f"| {r['prompt_set']} | {r['concurrency']} | {_fmt(r['vs_none'], '.3f')} | {r['best_fixed'] or '-'} | "
                         f"{_fmt(r['vs_best_fixed'], '.3f')} | {_fmt(r['mean_submitted_k'])} | {'yes' if r['ok'] else 'NO'} "
                         f"| {iv(r['vs_none_repeats'])} | {iv(r['vs_best_fixed_repeats'])} "
                         f"| {_fmt(r.get('vs_best_fixed_held_out'), '.3f')} |")
        bad = [r for r in rows if not r["ok"]]
        lines.append(f"\n{len(rows) - len(bad)} of {len(rows)} cells meet both goals" +
                     (": misses " + ", ".join(f"{r['prompt_set']}/c{r['concurrency']}" for r in bad) if bad else ""))
        aa = replica_control(result)
        if aa:
            lines.append(f"A/A control: {', '.join(aa['replicas'])} (no speculation, other engine processes) over none "
                         f"per cell {aa['range'][0]:.3f}-{aa['range'][1]:.3f} (geometric mean {aa['geomean']:.3f}); "
                         f"{aa['below_goal']} of {aa['cells']} replica cells below {aa['goal']}: a method exactly as "
                         f"fast as none misses the per-cell goal that often in this run")
        ho = [r["vs_best_fixed_held_out"] for r in rows if r.get("vs_best_fixed_held_out")]
        if ho:
            ins = [r["vs_best_fixed"] for r in rows if r.get("vs_best_fixed_held_out") and r.get("vs_best_fixed")]
            lines.append(f"adaptive / best fixed K pooled over cells (geometric mean): {_geomean(ins):.3f} in-sample, "
                         f"{_geomean(ho):.3f} against the K picked on the other repeats "
                         f"({sum(x >= 0.95 for x in ho)} of {len(ho)} cells >= 0.95 that way)")
    return lines


def compare(a: dict, b: dict) -> str:
    """Cell by cell: B relative to A (tok/s, speed-up, tau, TTFT and ITL p99)."""
    key = lambda c: (c["prompt_set"], c["concurrency"], c["method"])  # noqa: E731
    bm = {key(c): c for c in b["cells"]}
    lines = [f"A: {a['provenance'].get('git_commit', '?')[:10]} {a['provenance'].get('time', '')}  "
             f"B: {b['provenance'].get('git_commit', '?')[:10]} {b['provenance'].get('time', '')}",
             "", "| prompt set | conc | method | tok/s A -> B (B/A) | speed-up A -> B | tau A -> B | TTFT p99 B/A | ITL p99 B/A |",
             "|---|---|---|---|---|---|---|---|"]
    only_a = []
    for ca in a["cells"]:
        cb = bm.pop(key(ca), None)
        if cb is None:
            only_a.append(key(ca))
            continue

        def ratio(x, y):
            return f"{y / x:.3f}" if x and y else "-"

        ta, tb = ca.get("output_tokens_per_s"), cb.get("output_tokens_per_s")
        la, lb = ca["latency_ms"], cb["latency_ms"]
        lines.append(f"| {ca['prompt_set']} | {ca['concurrency']} | {ca['method']} | {_fmt(ta, '.0f')} -> {_fmt(tb, '.0f')} ({ratio(ta, tb)}) | "
                     f"{_fmt(ca.get('speedup'))} -> {_fmt(cb.get('speedup'))} | {_fmt(ca.get('tau'))} -> {_fmt(cb.get('tau'))} | "
                     f"{ratio(la['ttft_p99'], lb['ttft_p99'])} | {ratio(la['itl_p99'], lb['itl_p99'])} |")
    if only_a:
        lines.append(f"\nonly in A: {only_a}")
    if bm:
        lines.append(f"only in B: {list(bm)}")
    return "\n".join(lines)


def _save(plt, fig, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plots(result: dict, prefix: str) -> list[str]:
    """Three PNGs: speed-up vs concurrency, acceptance (histogram + prefix survival), time split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = result["cells"]
    methods = [m for m in result["methods"] if m != "none"]
    sets = [ps for ps in dict.fromkeys(c["prompt_set"] for c in cells)
            if len({c["concurrency"] for c in cells if c["prompt_set"] == ps}) > 1] or \
        list(dict.fromkeys(c["prompt_set"] for c in cells))[:1]
    files = []

    fig, axes = plt.subplots(1, len(sets), figsize=(4.5 * len(sets), 3.8), squeeze=False)
    for ax, ps in zip(axes[0], sets):
        for m in methods:
            cs = sorted((c["concurrency"], c.get("speedup")) for c in cells
                        if c["method"] == m and c["prompt_set"] == ps and c.get("speedup"))
            if cs:
                ax.plot([x for x, _ in cs], [y for _, y in cs], marker="o", label=m)
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("speed-up over no speculation (tok/s ratio)")
        ax.set_title(f"prompt set: {ps}")
        ax.legend(fontsize=8)
    files.append(_save(plt, fig, prefix + "_speedup.png"))

    ps = sets[0]
    spec_methods = [m for m in methods if any(c.get("accepted_hist") for c in cells if c["method"] == m)]
    if spec_methods:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
        c_lo = min(c["concurrency"] for c in cells if c["prompt_set"] == ps)
        width = 0.8 / len(spec_methods)
        for j, m in enumerate(spec_methods):
            c = _cell(cells, m, ps, c_lo)
            if c and c.get("accepted_hist"):
                h = c["accepted_hist"]
                tot = sum(h)
                ax1.bar([i + j * width for i in range(len(h))], [x / tot for x in h], width=width,
                        label=f"{m} (tau {c['tau']:.2f})")
        ax1.set_xlabel("accepted drafts per verify step")
        ax1.set_ylabel("fraction of verify steps")
        ax1.set_title(f"acceptance histogram, {ps}, concurrency {c_lo}")
        ax1.legend(fontsize=8)
        main = spec_methods[0]
        for c in sorted((c for c in cells if c["method"] == main and c["prompt_set"] == ps and c.get("prefix_survival")),
                        key=lambda c: c["concurrency"]):
            sv = c["prefix_survival"]
            ax2.plot(range(1, len(sv) + 1), sv, marker=".", label=f"c={c['concurrency']}")
        ax2.set_xlabel("draft position k")
        ax2.set_ylabel("P(A >= k)")
        ax2.set_ylim(0, 1.02)
        ax2.set_title(f"prefix survival, {main}, {ps}")
        ax2.legend(fontsize=8)
        files.append(_save(plt, fig, prefix + "_acceptance.png"))

    concs = sorted({c["concurrency"] for c in cells if c["prompt_set"] == ps})
    allm = ["none", *methods]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(concs) * len(allm) / 2), 4))
    width = 0.8 / len(allm)
    colors = {"T_v": "#4472c4", "T_d": "#ed7d31", "T_o": "#a5a5a5"}
    for j, m in enumerate(allm):
        xs, bottoms = [], []
        for i, conc in enumerate(concs):
            c = _cell(cells, m, ps, conc)
            if c is None:
                continue
            xs.append(i + j * width)
            bottoms.append(c)
        bottom = [0.0] * len(xs)
        for part in ("T_v", "T_d", "T_o"):
            vals = [c["step_ms"][part] or 0.0 for c in bottoms]
            ax.bar(xs, vals, width=width, bottom=bottom, color=colors[part], edgecolor="white", lw=0.5,
                   label=part if j == 0 else None)
            bottom = [a + b for a, b in zip(bottom, vals)]
        for x in xs:
            ax.text(x, 0, m[:6], rotation=90, fontsize=6, va="bottom", ha="center", color="white")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(concs))], [str(c) for c in concs])
    ax.set_xlabel("concurrency (bars: " + ", ".join(allm) + ")")
    ax.set_ylabel("ms per engine step")
    ax.set_title(f"step time split (T_v verify, T_d draft, T_o other), {ps}")
    ax.legend(fontsize=8)
    files.append(_save(plt, fig, prefix + "_time_split.png"))
    return files


def load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)
