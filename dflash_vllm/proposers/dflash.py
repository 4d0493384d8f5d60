"""Our DFlash proposer: one drafter pass per step emits K drafts per request.

Per step, for the batch the target just verified:
1. the target hidden states of the selected layers for the tokens it just ran are fused and
   written as drafter context K/V into the paged cache (tokens later found rejected are
   written too, past each request's verified length: they are never read, and the next
   verified token at that position overwrites them; this keeps the step free of host syncs);
2. each request gets a query block ``[anchor, mask x K]`` at positions
   ``ctx_len .. ctx_len + K``, where ctx_len counts verified tokens and the anchor is the
   token the target just sampled;
3. one drafter forward, the target's LM head on the K mask slots, drafts out.

How many of the K drafts each request submits is chosen per step by ``dflash_vllm.adaptive``
(model and equation there); a step where every request submits 0 skips the drafter forward
and defers its context K/V write to the next forward (batched, in step order; the rows of
requests that end first are never written), so later blocks still read the whole context.

vLLM's scheduler, block manager and rejection sampler stay in charge of everything else,
which is what keeps the add-on correct under continuous batching, chunked prefill, prefix
caching and preemption: drafter context lives in the same KV blocks as the target's tokens.
"""

from __future__ import annotations

import atexit
import json
import time

import numpy as np
import torch

from vllm.config import VllmConfig, get_layers_from_vllm_config
from vllm.forward_context import set_forward_context
from vllm.logger import init_logger
from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
from vllm.model_executor.models.interfaces import supports_multimodal
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

from .. import adaptive, envs, metrics, patches
from ..attention.backend import DraftBlockMetadata
from ..config import DrafterConfig, validate_pair

logger = init_logger("vllm.dflash_vllm.proposer")


# Context tokens whose K/V write may wait for the next drafter forward (and the memory their
# target features may hold meanwhile: 800 tokens for an 8B target with 5 feature layers; rows
# dropped from a queued step are freed once fewer than half of its rows are live, so the memory
# held is at most twice that, see _subset).
_MAX_DEFERRED, _MAX_DEFERRED_BYTES = 4096, 32 << 20
# Step clocks a dormant batch without drafter context holds before handing them to the policy
# (DFlashProposer._undraftable_plan): in one batch, after the forward's cold start.
_MAX_HELD = 64


class ContextQueue:
    """Context K/V rows whose write waits for the next drafter forward (steps that skip it).

    Each queued step keeps which request owns which rows. A request that finishes, or is
    preempted, before the write never reads those rows (a preempted one writes its whole
    context again when it resumes), so its rows are dropped instead of written: while drafting
    does not pay, most requests end before the next drafter forward, and their context is never
    computed. Rows are written in step order, so a slot freed by one request and reused by
    another ends with the later owner's K/V, as if every step had written at once.

    When the queue is full (a long run of steps without a drafter forward, e.g. a workload the
    drafter does not know, at high concurrency), the oldest requests' rows are shed instead of
    written: those requests are ``incomplete`` (their drafter context has holes) and are never
    drafted for again (the proposer masks them out of the plan) until they finish or are
    preempted. Writing them instead cost a K = 0 step ~5 % at batch 64 on the demo pair's chat
    prompts (a flush of ~4,000 rows every ~16 steps), for context that mostly nobody reads.
    Requests in ``protected`` (seeded ones, which draft K every step; "" for rows of unknown
    owner) are never shed.

    With prefix caching (``block_size`` set), a block a request filled outlives it: vLLM keeps
    it cached, and a later request with the same prefix (a shared system prompt, the next turn
    of a chat, the same request resumed after preemption) reads its drafter context from it
    without computing it again. So of an ended request's rows only those in its last, partial
    block (never cached) are dropped at its end. (Dropping them all left those blocks' drafter
    K/V unwritten, and every later request that hit them drafted from a garbled context.)
    At the limit, only generated rows are shed: rows from the first block that is not all
    prompt on (``cut``), of requests that ended and then of the oldest running ones; prompt
    blocks, which a shared system prompt's next request hits, are always written. The queue
    keeps a ledger of the KV blocks whose drafter context was shed (``unwritten``), from the
    block lists vLLM's scheduler hands the runner (``schedule``: host lists, no device sync):
    a block allocated anew to a request whose rows are written leaves it, and a new or resumed
    request whose prefix-cache hit covers an unwritten block is incomplete from its start (its
    rows from the hit on are never written: any request hitting them hits the unwritten block
    too; so is one that hit a block whose rows are shed after it, ``_mark``). The price: the
    next turn of a chat whose reply was shed (a run of K = 0 steps long enough to fill the
    queue) is never drafted for, nor is a seeded request that hits such a block (so its output
    is reproducible only with the same history of shedding). What it saves (session 22,
    ``dflash-vllm bench profile k0 --concurrency 64 --prompt-set chat``, cProfile over 49 steps):
    the proposer's K = 0 work 2.75 -> 2.10 ms per step, context writes 6 -> 2 (the two left are
    bursts of 64 prompts, written at once); on a step of ~28 ms, inside the bench's noise.
    """

    def __init__(self, block_size: int | None = None):
        self.block_size = block_size  # the KV block size with prefix caching on, else None
        self._length: dict[str, int] = {}  # req_id -> its queued rows' last position + 1 (prefix caching)
        # (step, features, positions, slot_mapping, req_ids, rows per request, first position per
        # request or None, the live rows' indices into the step's tensors or None for all: rows
        # dropped from an entry are only forgotten, copied out once at ``take``, see _subset)
        self.entries: list[tuple] = []
        self.rows = 0
        self.dropped = 0  # rows never written (their request ended first)
        self.shed_rows = 0  # rows never written (shed at the limit: their request became incomplete)
        self.shed_requests = 0
        self.closed_requests = 0  # of which context was never kept (close_door)
        self.incomplete: set[str] = set()  # live requests whose queued context was shed
        self.protected: set[str] = set()
        self._ended: dict[str, int] = {}  # req_id -> the step at which it was seen ended
        self._step = 0
        # Prefix caching: the ledger of blocks whose drafter context was shed (see the class).
        # ``ledger`` is off until the proposer finds the KV cache group of its layers.
        self.ledger = False
        self.unwritten: set[int] = set()  # KV block ids holding drafter context never written
        self.hit_unwritten = 0  # requests incomplete from their start (a prefix hit on an unwritten block)
        self._blocks: dict[str, list[int]] = {}  # req_id -> its block ids (the drafter's KV cache group)
        self._prompt_len: dict[str, int] = {}
        self._owner: dict[int, str] = {}  # block id -> the request that computed it (allocated it anew)
        self._cut: dict[str, int] = {}  # incomplete req_id -> the first position whose row is never written
        self._gone: set[str] = set()  # ended requests whose rows may still be queued
        self._started: dict[str, int] = {}  # req_id -> the step it started or resumed at
        self._hits: dict[str, tuple[int, list[int]]] = {}  # req_id -> (its prefix-cache hit, the blocks hit)
        self._readers: dict[int, set[str]] = {}  # block id -> running requests that hit it

    def end(self, finished=(), preempted=()) -> None:
        """A new step; the ids in ``finished`` and ``preempted`` ended since the last: their
        queued rows are never read (and a preempted request writes its whole context again
        when it resumes, so it is complete again)."""
        self._step += 1
        for ids, gone in ((finished, True), (preempted, False)):
            if self.entries:
                for r in ids or ():
                    self._ended[r] = self._step
            elif ids and self._blocks:
                self._forget(ids, prompts=gone)  # a preempted one resumes: its prompt length stays
            if self.incomplete and ids:
                self.incomplete.difference_update(ids)
                for r in ids:
                    self._cut.pop(r, None)

    # -- the ledger of unwritten blocks (prefix caching) ------------------------------------
    def schedule(self, new_reqs, cached, group: int = 0) -> None:
        """The blocks vLLM's scheduler allocated this step (``SchedulerOutput``'s
        ``scheduled_new_reqs`` and ``scheduled_cached_reqs``; ``group``: the KV cache group of
        the drafter's layers). A block allocated anew leaves ``unwritten`` if its request's rows
        are written and joins it if they are not; a request that starts (or resumes) with a
        prefix-cache hit on an unwritten block is incomplete from there on."""
        if not self.ledger:
            return
        for nr in new_reqs:
            prompt = nr.prompt_token_ids
            self._start(nr.req_id, list(nr.block_ids[group]) if nr.block_ids else [], nr.num_computed_tokens,
                        len(prompt) if prompt is not None else None)
        if cached is None or not cached.req_ids:
            return
        resumed = cached.resumed_req_ids
        for i, (rid, nb) in enumerate(zip(cached.req_ids, cached.new_block_ids)):
            if resumed and rid in resumed:
                self._start(rid, list(nb[group]) if nb else [], cached.num_computed_tokens[i], self._prompt_len.get(rid))
            elif nb and nb[group]:
                blocks = self._blocks.get(rid)
                if blocks is None:  # a request from before the ledger: its earlier blocks unknown
                    continue
                blocks.extend(nb[group])
                self._fresh(rid, nb[group])

    def _start(self, rid: str, blocks: list[int], hit: int, prompt_len: int | None) -> None:
        self._gone.discard(rid)  # resumed: its rows queued before are a running request's again
        self._started[rid] = self._step
        self._blocks[rid] = blocks
        if prompt_len is not None:
            self._prompt_len[rid] = prompt_len
        n_hit = -(-hit // self.block_size)
        unw = self.unwritten
        self._unread(rid)
        if unw and any(b in unw for b in blocks[:n_hit]):
            self._hit_unwritten(rid, hit)
        elif n_hit:  # if a block it hit is shed later (its owner's rows were still queued): see _mark
            self._hits[rid] = (hit, blocks[:n_hit])
            for b in blocks[:n_hit]:
                self._readers.setdefault(b, set()).add(rid)
        self._fresh(rid, blocks[n_hit:])

    def _cut_off(self, rid: str, cut: int | None) -> None:
        """``rid``'s rows from ``cut`` on are never written (None: none of them, no prefix
        caching): it is incomplete, and with prefix caching its blocks from there on are ledgered."""
        if cut is not None:
            self._mark(rid, cut)
            self._cut[rid] = cut
        self.incomplete.add(rid)

    def close_door(self, rids) -> int:
        """Keep no context for these requests (new ones, while drafting does not pay; see
        ``DFlashProposer._close_door``): incomplete from their start, as if shed at once. With
        prefix caching, from their prompt's last full block on (prompt blocks are written: a
        later request may hit them), and only with the ledger on. Protected requests are never
        closed. The number closed."""
        return len(self._close(rids))

    def _close(self, rids) -> dict:
        """Mark ``rids`` closed (``close_door``, ``close``): each incomplete from its cut on;
        protected and already incomplete ones, and with prefix caching those whose prompt length
        is unknown or all of them while the ledger is off, are left. The closed ones, with their cuts."""
        if self.block_size is not None and not self.ledger:
            return {}
        closed = {}
        for r in rids:
            if r in self.incomplete or r in self.protected:
                continue
            cut = None if self.block_size is None else self._cut_of(r)
            if self.block_size is not None and cut is None:
                continue
            self._cut_off(r, cut)
            closed[r] = cut
        self.closed_requests += len(closed)
        return closed

    def close(self, rids) -> int:
        """``close_door`` for running requests: from now on they keep no context, and their
        queued rows from the cut on are dropped, as ``shed`` drops them (with prefix caching
        their prompt blocks stay queued: a later request may hit them). The number closed."""
        victims = self._close(rids)
        if victims and self.entries:
            if self.block_size is None:
                self.shed_rows += self._keep(lambda r, step: r not in victims)
            else:
                started = self._started
                self.shed_rows += self._keep(lambda r, step: r not in victims or step < started.get(r, 0), victims)
        return len(victims)

    def _hit_unwritten(self, rid: str, hit: int) -> None:
        self.incomplete.add(rid)
        self._cut[rid] = hit
        self.hit_unwritten += 1

    def _unread(self, rid: str) -> None:
        h = self._hits.pop(rid, None)
        if h is not None:
            for b in h[1]:
                readers = self._readers.get(b)
                if readers is not None:
                    readers.discard(rid)
                    if not readers:
                        del self._readers[b]

    def _fresh(self, rid: str, blocks) -> None:
        """Blocks allocated anew to ``rid``: its rows will be written there, or not (incomplete)."""
        owner, unw = self._owner, self.unwritten
        if rid in self.incomplete:
            unw.update(blocks)
        elif unw:
            unw.difference_update(blocks)
        for b in blocks:
            owner[b] = rid

    def _mark(self, rid: str, cut: int) -> None:
        """``rid``'s rows from position ``cut`` on are never written: its blocks from there on
        (those it computed, not since allocated to another) are unwritten."""
        owner, unw = self._owner, self.unwritten
        new = [b for b in self._blocks.get(rid, ())[cut // self.block_size:] if owner.get(b) == rid and b not in unw]
        unw.update(new)
        for b in new:  # running requests that hit it while its rows were queued read it too
            for reader in self._readers.pop(b, ()):
                h = self._hits.get(reader)
                if h is not None and reader not in self.incomplete and reader in self._blocks and reader not in self._gone:
                    self._unread(reader)
                    self._hit_unwritten(reader, h[0])
                    self._mark(reader, h[0])  # its own blocks: never written from now on

    def _cut_of(self, rid: str) -> int | None:
        """Where ``rid``'s generated rows start, rounded down to a block boundary (the block with
        the prompt's tail holds generated tokens too: only a request with the same reply hits it),
        or None if its prompt length is unknown."""
        n = self._prompt_len.get(rid)
        return None if n is None or rid not in self._blocks else n // self.block_size * self.block_size

    def _forget(self, rids, prompts: bool = True) -> None:
        for r in rids:
            self._blocks.pop(r, None)
            self._unread(r)
            if prompts:
                self._prompt_len.pop(r, None)
                self._started.pop(r, None)

    def add(self, features, positions, slot_mapping, req_ids: list[str], counts: np.ndarray,
            starts: np.ndarray | None = None, checked: bool = False) -> None:
        """Queue one step's rows: ``counts[i]`` rows of request ``req_ids[i]``, in order, at
        positions ``starts[i]`` onward (host-side; needed with prefix caching only). ``checked``:
        the caller passes only rows ``kept_rows`` keeps (the K = 0 step: not checked twice)."""
        if self.block_size is not None:
            if starts is None:  # positions unknown: nothing of these rows may be dropped
                req_ids, counts = [""], np.array([int(np.sum(counts))])
            else:
                self._length.update(zip(req_ids, (starts + counts).tolist()))
        e = (self._step, features, positions, slot_mapping, req_ids, counts, starts, None)
        keep = None if checked else self.needed(req_ids, counts, starts)  # nobody reads an incomplete request's rows
        if keep is not None:  # (with prefix caching: its rows before its cut are read)
            e = _subset(e, keep, per_row=True)
            self.shed_rows += _num_rows(features) - (_live_rows(e) if e is not None else 0)
            if e is None:
                return
        self.entries.append(e)
        self.rows += _live_rows(e)

    def kept_rows(self, req_ids: list[str], counts: np.ndarray, starts: np.ndarray | None) -> np.ndarray | None:
        """How many of each request's rows of a step ``add`` would keep (its first ones), or None
        for all: an incomplete request's rows are dropped (with prefix caching, those from its
        cut on; its rows are at positions ``starts[i]`` on) before the features are even
        gathered (at batch 64, most of a K = 0 step's rows once they are shed)."""
        inc = self.incomplete
        if not inc or inc.isdisjoint(req_ids):  # (in C: the common case costs ~1 us)
            return None
        # (Python lists over the batch's 1-64 requests: a few numpy calls on arrays this small
        # cost more, most of all right after the target forward, where this runs.)
        cn, cut = counts.tolist(), self._cut
        if cut and starts is not None:
            get = cut.get
            kept = [c if r not in inc else min(max(get(r, 0) - s0, 0), c) for r, s0, c in zip(req_ids, starts.tolist(), cn)]
        else:
            kept = [0 if r in inc else c for r, c in zip(req_ids, cn)]
        return None if kept == cn else np.array(kept, dtype=counts.dtype)

    def needed(self, req_ids: list[str], counts: np.ndarray, starts: np.ndarray | None) -> np.ndarray | None:
        """Which of a step's rows ``add`` would keep (a mask over rows), or None for all (``kept_rows``)."""
        kept = self.kept_rows(req_ids, counts, starts)
        return None if kept is None else _first_rows(counts, kept)

    def prune(self) -> None:
        """Drop the rows of requests that ended after their rows were queued (with prefix
        caching: only those past the last full block)."""
        ended = self._ended
        if not ended:
            return
        if self.block_size is None:
            self.dropped += self._keep(lambda r, step: ended.get(r, -1) <= step)
        else:
            bs, length = self.block_size, self._length
            cached = {r: length.pop(r, 0) // bs * bs for r in ended}  # rows below: in full blocks
            self.dropped += self._keep(lambda r, step: ended.get(r, -1) <= step, cached)
            if self.ledger:  # their rows in full blocks stay queued: shed first (shed); not one resumed since
                started = self._started
                self._gone.update(r for r, step in ended.items() if started.get(r, -1) <= step)
        ended.clear()

    def shed(self, max_rows: int) -> None:
        """Shed whole requests' rows, oldest first, until at most ``max_rows`` stay queued; those
        requests become incomplete. With prefix caching, their generated rows only, those of
        requests that ended first, and only with the ledger on (see the class)."""
        if self.block_size is not None:
            if self.ledger:
                self._shed_generated(max_rows)
            return
        per_req: dict[str, int] = {}  # in order of first queued row
        for e in self.entries:
            for r, n in zip(e[4], e[5].tolist()):
                per_req[r] = per_req.get(r, 0) + n
        rows, victims = self.rows, set()
        for r, n in per_req.items():
            if rows <= max_rows:
                break
            if r and r not in self.protected:
                victims.add(r)
                rows -= n
        if victims:
            self.incomplete |= victims
            self.shed_requests += len(victims)
            self.shed_rows += self._keep(lambda r, step: r not in victims)

    def _shed_generated(self, max_rows: int) -> None:
        """Prefix caching: shed the rows at or after each request's ``_cut_of`` (its generated
        rows), ended requests first, then the oldest running ones, until at most ``max_rows``
        stay queued; their blocks from there on are unwritten, and the running ones incomplete."""
        rows_after: dict[str, int] = {}  # in order of first queued row
        cuts: dict[str, int] = {}
        started = self._started
        for e in self.entries:
            counts, starts = e[5], e[6]
            if starts is None:
                continue
            for r, n, s0 in zip(e[4], counts.tolist(), starts.tolist()):
                c = cuts.get(r)
                if c is None:
                    c = self._cut_of(r) if r and r not in self.protected else None
                    c = cuts[r] = -1 if c is None else c
                if c >= 0 and e[0] >= started.get(r, 0):  # rows of its life now (see below)
                    rows_after[r] = rows_after.get(r, 0) + max(0, s0 + n - max(s0, c))
        gone = self._gone
        order = [r for r in rows_after if r in gone] + [r for r in rows_after if r not in gone]
        rows, victims = self.rows, {}
        for r in order:
            if rows <= max_rows:
                break
            if rows_after[r]:
                victims[r] = cuts[r]
                rows -= rows_after[r]
        if not victims:
            return
        for r, c in victims.items():
            if r in gone:
                self._mark(r, c)
            else:
                self._cut_off(r, c)
                self.shed_requests += 1
        # Rows a preempted request queued before it resumed stay (in full blocks, see prune): its
        # blocks then are not the ones the ledger marks now, and a later request may hit them.
        self.shed_rows += self._keep(lambda r, step: r not in victims or step < started.get(r, 0), victims)

    def _keep(self, live_fn, cached: dict[str, int] | None = None) -> int:
        """Keep the rows whose (request, step queued) pass ``live_fn``, and of the others those
        at positions below ``cached[request]``; the number dropped."""
        kept, rows, dropped = [], 0, 0
        for e in self.entries:
            step, req_ids, before = e[0], e[4], _live_rows(e)
            if len(req_ids) == 1:  # one request's rows (every entry at batch 1): no array work
                r = req_ids[0]
                whole = live_fn(r, step)
                if not whole and cached is not None and e[6] is not None:
                    first, limit = int(e[6][0]), cached.get(r, 0)  # its rows: positions first.. on
                    whole = first + int(e[5][0]) <= limit
                    if not whole and first < limit:  # part of its rows below the limit: as below
                        whole = None
                if whole is not None:
                    if whole:
                        kept.append(e)
                        rows += before
                    else:
                        dropped += before
                    continue
            live = np.fromiter((live_fn(r, step) for r in req_ids), dtype=bool, count=len(req_ids))
            if cached is not None and not live.all():
                counts, starts = e[5], e[6]
                limit = np.array([cached.get(r, 0) for r in req_ids])
                # rows of a request that ended: kept while their position is below its limit
                live = np.repeat(live, counts) | (_row_positions(counts, starts) < np.repeat(limit, counts))
                e = _subset(e, live, per_row=True)
            else:
                e = _subset(e, live)
            n = _live_rows(e) if e is not None else 0
            dropped += before - n
            if e is not None:
                kept.append(e)
                rows += n
        self.entries, self.rows = kept, rows
        return dropped

    def take(self):
        """Every live queued row, in step order, as (features, positions, slot_mapping) or None; the queue empties."""
        self.prune()
        entries = self.entries
        self.entries, self.rows = [], 0
        self._length.clear()
        if self._gone:
            self._forget(self._gone)
            self._gone.clear()
        if not entries:
            return None
        e = entries[0]
        if len(entries) == 1 and e[7] is None and not isinstance(e[1], _Parts):
            return e[1:4]
        index = _live_index(entries)
        if index is not None:
            index = torch.from_numpy(index).to(entries[0][2].device)
        return _gather_features(entries, index), _gather(entries, 2, index), _gather(entries, 3, index)


class _Parts(tuple):
    """A step's target features one tensor per feature layer (rows x that layer's width), not
    yet concatenated: what a K = 0 step queues when it keeps only some rows (those of requests
    whose context was not shed, gathered per layer), concatenated once at ``take``, of the rows
    still live then. (Until session 27 every K = 0 step queued the target's own tensors so, by
    reference: see ``_queued_features`` for why it copies now.)"""


def _num_rows(features) -> int:
    return (features[0] if isinstance(features, _Parts) else features).shape[0]


def _row_bytes(features) -> int:
    parts = features if isinstance(features, _Parts) else (features,)
    return sum(p.shape[-1] * p.element_size() for p in parts)


def _dense(features) -> torch.Tensor:
    """One [rows, width] tensor (the features of every layer side by side)."""
    return torch.cat(features, dim=-1) if isinstance(features, _Parts) else features


def _live_rows(entry: tuple) -> int:
    sel = entry[7]
    return _num_rows(entry[1]) if sel is None else len(sel)


def _live_index(entries: list[tuple]) -> np.ndarray | None:
    """The live rows of ``entries`` as indices into every entry's rows concatenated in order;
    None if every row is live."""
    if all(e[7] is None for e in entries):
        return None
    parts, off = [], 0
    for e in entries:
        n, sel = _num_rows(e[1]), e[7]
        parts.append(np.arange(off, off + n) if sel is None else sel + off)
        off += n
    return np.concatenate(parts)


def _gather(entries: list[tuple], i: int, index: torch.Tensor | None) -> torch.Tensor:
    """Field ``i`` (positions, slot mapping) of every entry's live rows, in order (``index``:
    ``_live_index`` as a tensor)."""
    t = entries[0][i] if len(entries) == 1 else torch.cat([e[i] for e in entries])
    return t if index is None else t.index_select(0, index)


def _gather_features(entries: list[tuple], index: torch.Tensor | None) -> torch.Tensor:
    """Every entry's live feature rows, in order, in one [rows, width] tensor (``index``:
    ``_live_index`` as a tensor): per feature layer, one ``torch.cat`` of every entry's rows
    and one ``index_select`` of the live ones, then the layers side by side. (Until session 46
    each entry's live rows were indexed apart and concatenated into the output's columns: at
    batch 8 with the door closed, ~210 entries of 8 rows, 4 live, that was 16 ms of a probe's
    ~50-ms flush, line by line ``bench/results/s46/scratch/flush_lines.py``.) An entry holds
    at most twice its live rows (``_subset``), so the concatenation before the selection
    copies at most twice the rows kept. (At batch 1 a queue holds hundreds of one-row steps: a
    copy per step and layer cost ~4x one concatenation.)"""
    # Layer by layer where every step was queued per layer (_Parts: steps that kept only some
    # rows; a queue can hold both kinds), else every step's rows whole (a _Parts step concatenated first).
    if all(isinstance(e[1], _Parts) for e in entries):
        cols = [torch.cat([e[1][j] for e in entries]) for j in range(len(entries[0][1]))]
    else:
        cols = [torch.cat([_dense(e[1]) for e in entries])]
    if index is not None:
        cols = [c.index_select(0, index) for c in cols]
    return cols[0] if len(cols) == 1 else torch.cat(cols, dim=-1)


def _queued_features(aux_hidden_states, n: int) -> torch.Tensor:
    """The first ``n`` rows of the target's feature layers, to be queued by a K = 0 step: one
    copy (concatenated), never the target's own tensors. Holding those by reference (sessions
    23-26, then ``_held``, to save this copy) kept each K = 0 step's activations alive for as
    long as its rows stayed queued, and the target's forward got slower for it: on the demo pair, K = 0 against
    no speculation over chat and free at c = 1..64 (session 27, ``bench/results/s27/k0-context``),
    the target forward read 1.02-1.05x none's held against 1.00-1.01x copied, the whole step
    0.913-0.948 of none's held (three runs) against 0.946 and 0.966 copied, with the copy's
    host time within the noise. (A buffer a later step writes into could not be held anyway.)"""
    return torch.cat([_rows(h, n) for h in aux_hidden_states], dim=-1)


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """``t[:n]``, without the slicing call where ``t`` has ``n`` rows already (see _plan_then_propose)."""
    return t if t.shape[0] == n else t[:n]


def _first_rows(counts: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """A mask over a step's rows (``counts[i]`` per request, in order): the first ``kept[i]`` of each request's."""
    if (counts == 1).all():  # one row each (decode): no expansion
        return kept > 0
    first = np.cumsum(counts) - counts
    return np.arange(int(counts.sum())) < np.repeat(first + kept, counts)


def _row_positions(counts: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each row's position, for rows queued ``counts[i]`` per request from ``starts[i]`` on."""
    first = np.cumsum(counts) - counts
    return np.repeat(starts - first, counts) + np.arange(int(counts.sum()))


def _subset(entry: tuple, live: np.ndarray, per_row: bool = False) -> tuple | None:
    """A queued step (see ContextQueue.entries) cut to the requests in ``live`` (``per_row``: to
    the rows in it, a request keeping its first rows); None if none. The tensors are not
    copied: the entry keeps the indices of its live rows (``take`` copies them out once),
    unless fewer than half of the step's rows are left, which are then copied out now (so an
    entry never holds more than twice its live rows' memory)."""
    if live.all():
        return entry
    if not live.any():
        return None
    step, features, positions, slots, req_ids, counts, starts, sel = entry
    if per_row:  # rows kept per request (a prefix of its rows: the ones in full blocks)
        rows = live
        kept = np.bincount(np.repeat(np.arange(len(counts)), counts)[rows], minlength=len(counts))
        keep = kept > 0
    else:
        rows, kept, keep = np.repeat(live, counts), counts, live
    idx = np.flatnonzero(rows)
    sel = idx if sel is None else sel[idx]
    if 2 * len(sel) < _num_rows(features):
        t = torch.from_numpy(sel).to(positions.device)
        if isinstance(features, _Parts):
            features = _Parts(p[t] for p in features)
        else:
            features = features[t]
        positions, slots, sel = positions[t], slots[t], None
    return (step, features, positions, slots, [r for r, x in zip(req_ids, keep) if x], kept[keep],
            None if starts is None else starts[keep], sel)


class DFlashProposer(SpecDecodeBaseProposer):
    SENTINELS = 4  # requests that keep drafter context while drafting does not pay (_close_door)
    CLOSE_AFTER = 32  # steps dormant in a row before no request keeps context away from probes (_keeps_none)

    def __init__(self, vllm_config: VllmConfig, device: torch.device, runner=None):
        spec = vllm_config.speculative_config
        assert spec is not None and spec.method == "dflash"
        self.drafter_config = DrafterConfig.from_pretrained(spec.draft_model_config.model)
        target_hf = vllm_config.model_config.hf_text_config
        validate_pair(
            self.drafter_config,
            target_num_layers=target_hf.num_hidden_layers,
            target_hidden_size=target_hf.hidden_size,
            target_vocab_size=vllm_config.model_config.get_vocab_size(),
            num_speculative_tokens=spec.num_speculative_tokens,
        )
        super().__init__(vllm_config=vllm_config, device=device, pass_hidden_states_to_model=True, runner=runner)
        self.max_query_len = 1 + self.num_speculative_tokens
        self._block_offsets = torch.arange(self.max_query_len, device=device)
        self._init_policy(vllm_config, runner)

    # -- adaptive drafting (see dflash_vllm/adaptive.py) --------------------------------------
    def _init_policy(self, vllm_config: VllmConfig, runner) -> None:
        k_max = self.num_speculative_tokens
        fixed = adaptive.fixed_k_from_env(k_max)
        self.num_drafter_forwards = self.num_skipped_forwards = 0
        self.submitted_hist = np.zeros(k_max + 1, dtype=np.int64)
        self._pending_k: np.ndarray | None = None
        cache = vllm_config.cache_config
        self._ctx_queue = ContextQueue(cache.block_size if cache.enable_prefix_caching else None)
        self._kv_group: int | None = None  # the KV cache group of the drafter's layers (prefix caching)
        self._skipped_step = False  # this step's plan: no drafts for anyone
        self._draft_timing: tuple | None = None
        self._flush_s = 0.0  # context K/V written within the current drafting call
        self._runner = runner
        # Per-request lengths reach the scheduler only as the lists that take_draft_token_ids
        # hands it (synchronous scheduling). Under async scheduling vLLM schedules K
        # placeholder slots per request before our drafts exist, so K stays fixed there.
        # Neither adaptive drafting nor a pin asked for (the default): K every step, nothing wrapped.
        default = envs.value(envs.FIXED_K) in ("", "none", "None")
        self.policy_active = (runner is not None and not vllm_config.scheduler_config.async_scheduling
                              and not default)
        # Under tensor parallelism every rank runs the drafter forward (collectives inside) but
        # measures its own step times: only a pinned K keeps the block length identical on all
        # ranks, so an adaptive policy there varies the submitted lengths only (rank 0's count).
        self._same_on_all_ranks = fixed is not None or vllm_config.parallel_config.world_size == 1
        self.policy = adaptive.AdaptivePolicy(k_max, fixed=fixed, forward_drafting_rows_only=self._same_on_all_ranks)
        if not self.policy_active:
            if not default and (fixed is not None or runner is not None):
                logger.warning("dflash-vllm: async scheduling is on, so every request drafts K=%d every step "
                               "(adaptive drafting and %s need --no-async-scheduling)", k_max, adaptive.CONFIG_KEY)
            return
        patches.require("adaptive-runner-hooks")  # asserts the hooked attribute exists
        runner._bookkeeping_sync = _after(runner._bookkeeping_sync, self._observe_verified)
        take = runner.take_draft_token_ids
        runner.take_draft_token_ids = lambda: self._take_drafts(take)
        self._planned_q: int | None = None
        self._dormant_run = 0  # plans in a row with the policy dormant (_keeps_none)
        self._idle_clocks: list[tuple] = []  # the idle window's steps' clocks, not yet handed over (_idle_plan)
        self._step_start: float | None = None
        self._call_end: float | None = None  # the previous drafting call ended
        self._plan_start: float | None = None
        # The previous step's host time from its plan to its drafting call (a K = 0 step: to
        # the end of its deferred context copy): no other clock sees it (see _plan).
        self._overhead = 0.0
        execute = runner.execute_model

        def execute_model(*args, **kwargs):  # the step's start: the policy's clock
            self._step_start = time.perf_counter()
            return execute(*args, **kwargs)

        runner.execute_model = execute_model
        propose_ids = runner.propose_draft_token_ids  # bound: the class-level timers stay inside
        runner.propose_draft_token_ids = lambda *a: self._plan_then_propose(propose_ids, *a)
        if _plain_steps_patchable(runner):
            runner._prepare_inputs = _plain_when_undrafted(runner, runner._prepare_inputs)
        self._record_lengths: bool | None = None  # decided at the first step (distributed state is up)
        if envs.enabled(envs.ADAPTIVE_STATS):
            atexit.register(lambda: print("dflash-vllm adaptive stats: " + json.dumps(self.stats()), flush=True))
        logger.info("dflash-vllm: %s", f"drafts pinned to K={fixed}" if fixed is not None else
                    f"adaptive drafting on (0..{k_max} drafts per request per step; \"{adaptive.ADAPTIVE_KEY}\": "
                    f"false in the speculative config drafts {k_max} every step)")

    def stats(self) -> dict:
        return {"drafter_forwards": self.num_drafter_forwards, "skipped_forwards": self.num_skipped_forwards,
                "submitted_hist": self.submitted_hist.tolist(), "context_rows_dropped": self._ctx_queue.dropped,
                "context_rows_shed": self._ctx_queue.shed_rows, "requests_shed": self._ctx_queue.shed_requests,
                "requests_closed_at_door": self._ctx_queue.closed_requests,
                "requests_hit_unwritten": self._ctx_queue.hit_unwritten, "blocks_unwritten": len(self._ctx_queue.unwritten),
                "verify_steps_observed": self.policy.acceptance.verified_steps}

    def _observe_verified(self, result, scheduler_output, *args, **kwargs) -> None:
        """After vLLM's bookkeeping (host lists already there, no sync added): accepted drafts
        per request for the drafts verified this step. Not under a pinned K, whose plan reads
        no acceptance: the bookkeeping cost ~0.13 ms a drafted step at batch 1 on the demo pair
        (session 45, ``bench/results/s45/scratch/plan_lines.py 15 1``), ~1 % of the step."""
        if self.policy.fixed is not None:
            return
        valid, id_to_index = result[3], result[6]
        model = self.policy.acceptance
        ids, drafted, accepted = [], [], []
        for rid, toks in scheduler_output.scheduled_spec_decode_tokens.items():
            i = id_to_index.get(rid)
            if not toks or toks[0] < 0 or i is None or i >= len(valid) or not valid[i]:
                continue  # placeholder drafts (-1) or a discarded row
            ids.append(rid)
            drafted.append(len(toks))
            accepted.append(len(valid[i]) - 1)
        model.observe(ids, drafted, accepted)
        if scheduler_output.finished_req_ids:
            model.forget(scheduler_output.finished_req_ids)

    def _take_drafts(self, take):
        """The runner's take_draft_token_ids, each list cut to its planned length. After a step
        that drafted for nobody: None, as a runner without drafts returns, so that the
        scheduler skips its per-request update (setting every request's empty draft list
        again: ~0.1 ms per step at batch 64 on CPU; the scheduler empties the lists when it
        schedules them, so nothing stale stays behind)."""
        if self._skipped_step:
            self._skipped_step, self._pending_k = False, None
            return None
        return self._submit(take())

    def _submit(self, draft: "DraftTokenIds | None"):
        """Truncate each request's draft list to its planned length. This is where vLLM already
        waits for the drafts' device-to-host copy and turns them into Python lists, so per-request
        lengths cost no extra host sync; the alternative (per-request lengths on the device,
        padded) would need a sync to tell the scheduler the lengths."""
        k, self._pending_k = self._pending_k, None
        if draft is None or k is None or len(k) != len(draft.draft_token_ids):
            return draft
        draft.draft_token_ids = [ids[:n] for ids, n in zip(draft.draft_token_ids, k.tolist())]
        return draft

    def _plan_then_propose(self, propose_ids, scheduler_output, sampled_token_ids, sampling_metadata,
                           hidden_states, sample_hidden_states, aux_hidden_states, spec_decode_metadata,
                           common_attn_metadata, slot_mappings):
        """The runner's propose_draft_token_ids, with the plan made first. A step where every
        request submits 0 drafts skips vLLM's drafter input preparation too (next-token ids,
        rejected-token counts, metadata: ~1 ms of host work per step on CPU) and only queues
        the context K/V write; the next step, with no drafts scheduled, then takes vLLM's
        plain-decode path (``_plain_when_undrafted``): no rejection sampler."""
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
        if k_max and n and runner.input_batch.num_reqs:
            num_reqs = runner.input_batch.num_reqs
            q = self._plan(num_reqs, n, k_max, sampling_metadata)
            self._dormant_run = self._dormant_run + 1 if self.policy.dormant else 0
            # Under async scheduling the skipped preparation would also feed the next step's
            # input corrections; there K is fixed anyway (the policy is off).
            if (q == 0 and aux_hidden_states is not None and runner.valid_sampled_token_count_event is None):
                # (PyTorch calls on these 1-64-row tensors cost ~5-8 us each right after the target
                # forward, and this step's host work is what a K = 0 step pays over a plain one, all
                # of it (session 41, bench/results/s41/k0-stub.json): numpy views and no slice of a
                # tensor that already has the rows wanted.)
                req_ids = runner.input_batch.req_ids[:num_reqs]
                self._close_running(req_ids, num_reqs)
                qsl = common_attn_metadata.query_start_loc_cpu.numpy()[: num_reqs + 1]
                counts = qsl[1:] - qsl[:-1]
                starts = runner.input_batch.num_computed_tokens_cpu[:num_reqs].copy()  # first positions
                positions, slots = runner._get_positions(n), _rows(common_attn_metadata.slot_mapping, n)
                kept = queue.kept_rows(req_ids, counts, starts)
                if kept is None:
                    features = _queued_features(aux_hidden_states, n)
                else:  # rows of incomplete requests (ContextQueue): never copied
                    rows = np.flatnonzero(_first_rows(counts, kept))
                    queue.shed_rows += n - len(rows)
                    sel = kept > 0
                    req_ids, counts, starts = [r for r, x in zip(req_ids, sel) if x], kept[sel], starts[sel]
                    idx = torch.from_numpy(rows).to(positions.device)
                    n = len(rows)
                    features = _Parts(h[idx] for h in aux_hidden_states) if n else None
                    positions, slots = positions[idx], slots[idx]
                if n:
                    self._skip_forward(features, positions, slots, n, (req_ids, counts, starts), checked=True)
                else:
                    self.num_skipped_forwards += 1
                self._skipped_step = True  # nothing to hand the scheduler (see _take_drafts)
                self._call_end = time.perf_counter()
                self._overhead = self._call_end - self._plan_start
                # Lists, as vLLM's CPU-side proposers return them: no device tensor to copy back.
                return [[] for _ in range(num_reqs)]
            self._planned_q = q
        self._flush_s = 0.0
        t0 = time.perf_counter()
        self._overhead = t0 - self._plan_start if self._plan_start is not None else 0.0
        try:
            return propose_ids(scheduler_output, sampled_token_ids, sampling_metadata, hidden_states,
                               sample_hidden_states, aux_hidden_states, spec_decode_metadata,
                               common_attn_metadata, slot_mappings)
        finally:  # on CUDA the host clock sees launches only: the gap then holds the forward's tail
            self._call_end = time.perf_counter()
            t = self._draft_timing
            if t is not None and t[0] == "cpu" and t[1] >= t0:
                # On CPU, T_d is the whole drafting call: vLLM's drafter input preparation before
                # our forward (next-token ids, rejected counts, metadata: ~1 ms per step on the demo
                # pair) and its handling of the drafts after it are paid only on drafted steps, and
                # no other clock of the policy sees them (the step clock stops where this call
                # starts and restarts where it ends). The context this step verified is written
                # inside it (a drafted step's own cost: 7 % of a step at batch 1 on the demo pair,
                # K = 15); the rows K = 0 steps deferred stay out (see _flush_queue).
                self._draft_timing = ("cpu", t0 + self._flush_s, self._call_end, *t[3:])

    def _close_door(self, new_reqs) -> None:
        """While drafting does not pay (the policy's optimum: no drafts, by a margin:
        ``AdaptivePolicy.closes_door``), keep drafter context
        for ``SENTINELS`` requests only: a request that arrives when as many with context are
        running gets none (ContextQueue.close_door), so its rows are never copied, queued,
        shed or written. Probes draft for the sentinels (and the forward runs for those only,
        _drafting_rows): enough rows to tell a change of workload, at a fraction of a whole
        batch's block forward. Once drafting pays again, requests arrive with context as usual;
        the closed ones never draft (they finish without speculation). Before this, at batch 64
        on prompts the drafter does not know, the queue kept every request's rows and shed ~90 %
        of them unwritten at its limit: ~0.5 ms of host work per step (session 27). Requests with
        their own seed are never closed (they draft K every step)."""
        runner, queue = self._runner, self._ctx_queue
        num_reqs = runner.input_batch.num_reqs
        room = (0 if self._keeps_none(num_reqs) else self.SENTINELS) - (num_reqs - len(queue.incomplete))
        if room >= 0:
            return
        # A seed from the request itself: the sampling metadata holds no generator for a
        # prompt's partial chunks (fixes/cpu_seeded_chunks.py), and a seeded request closed on
        # its first chunk never drafted, so its output depended on how its prompt was chunked.
        ids = [nr.req_id for nr in new_reqs if getattr(nr.sampling_params, "seed", None) is None]
        queue.close_door(ids[max(0, len(ids) + room):])

    def _close_running(self, req_ids: list[str], num_reqs: int) -> None:
        """After a plan of no drafts, while drafting does not pay by a margin
        (``AdaptivePolicy.closes_door``), for ``CLOSE_AFTER`` plans in a row, and no probe is near
        (``_keeps_none``): the running requests that still keep drafter context keep none from
        now on (ContextQueue.close), so that a step without drafts queues no rows at all, and a
        probe flushes none. A probe then drafts for requests that arrive once it is near
        (``_close_door`` leaves them ``SENTINELS`` places), from their prompt on. Seeded requests
        are never closed (they draft K every step; the seed is read from the request itself, as
        in _close_door).

        What it saves (session 48, demo pair): with nothing queued on any step without drafts
        (an upper bound, ``bench/results/s48/bound.json``, chat and free at c = 1-16), adaptive's
        step time outside the forwards fell from +0.28 to +0.15 ms over no speculation's and its
        probes' from 0.14 to 0.06 ms a step (tok/s 0.979 -> 1.015 of no speculation's). This rule,
        in same-run A/Bs over the full check's 28 cells (``ab-guard.json``): in the weak cells at
        c = 16-64 -0.19 ms outside the forwards and 0.20 against 0.37 ms of probes a step; tok/s
        +2 % in the weak cells, +0.5 % in the strong ones, once the bench's engine start-order
        bias, measured by A/A runs of one code (``ab-aa*.json``), is taken out. At c = 1-4 the
        door mostly stays open (drafting within ``DOOR_BELOW`` of no drafts) and nothing changes."""
        queue = self._ctx_queue
        inc, protected = queue.incomplete, queue.protected
        if num_reqs - len(inc) <= len(protected) or not self._keeps_none(num_reqs):
            return
        reqs = self._runner.requests
        ids = [r for r in req_ids if r not in inc and r not in protected
               and getattr(getattr(reqs.get(r), "sampling_params", None), "seed", None) is None]
        if ids:
            queue.close(ids)

    def _keeps_none(self, num_reqs: int) -> bool:
        """Whether no request keeps drafter context now (``_close_running``, ``_close_door``):
        the policy has been dormant for ``CLOSE_AFTER`` plans in a row, the door is closed
        (``AdaptivePolicy.closes_door``) and no probe is near. A
        closed request never drafts, so a dormant spell shorter than that (the cost model pricing
        a few steps of a workload that pays badly, a cell's start) closes only arrivals beyond the
        sentinels, as before. (Without the wait, session 48's first A/B, ``ab-close.json``, had
        code c = 8-32 submit 8.0-8.6 drafts a request against 10.1-11.9; its strong cells' tok/s
        were the same once the bench's start-order bias is out.)"""
        return (self._dormant_run >= self.CLOSE_AFTER and self.policy.closes_door(num_reqs)
                and not self.policy.probe_soon(num_reqs))

    def _find_kv_group(self, runner) -> int:
        """The KV cache group holding every drafter layer (its block ids are the ones the
        context ledger follows, ContextQueue.schedule), and the ledger on; -1 and the ledger off
        if there is none (then nothing of a prefix-cached block is ever shed)."""
        names = getattr(self, "_draft_attn_layer_names", None)
        groups = getattr(getattr(runner, "kv_cache_config", None), "kv_cache_groups", None)
        if not names or not groups:
            return -1
        found = [i for i, g in enumerate(groups) if names & set(g.layer_names)]
        if len(found) != 1 or not names <= set(groups[found[0]].layer_names):
            return -1
        bs = getattr(groups[found[0]].kv_cache_spec, "block_size", None)
        if not bs:
            return -1
        self._ctx_queue.block_size, self._ctx_queue.ledger = int(bs), True
        return found[0]

    def _plan(self, num_reqs: int, num_tokens: int, k_max: int, sampling_metadata) -> int:
        """The plan of this step (drafts per request), after handing the policy its clocks: the
        step (from the runner's execute_model to here, plus the time since the previous
        drafting call ended, plus the previous step's own plan and, for a K = 0 step, its
        deferred context copy: the host work every plain step pays) and the previous drafting
        call (``_observe_draft_time``). In the policy's idle window (``_idle_plan``) the clocks
        wait, and the plan is the window's."""
        runner = self._runner
        now = self._plan_start = time.perf_counter()
        step_start, self._step_start = self._step_start, None
        gap = step_start - self._call_end if step_start is not None and self._call_end is not None else None
        overhead, self._overhead = self._overhead, 0.0
        clocks = (now, num_tokens, num_reqs, step_start, gap, overhead)
        inc = self._ctx_queue.incomplete
        if inc and self._undraftable_plan(inc, num_reqs, clocks, sampling_metadata):
            return 0
        if self.policy.idle_left > 0 and self._idle_plan(num_reqs, clocks, sampling_metadata):
            return 0
        self._catch_up()
        self._observe_draft_time()
        self.policy.on_step(*clocks)
        req_ids = runner.input_batch.req_ids[:num_reqs]
        is_decode = ~runner.discard_request_mask.np[:num_reqs].astype(bool)  # partial prefills draft nothing
        queue, draftable = self._ctx_queue, is_decode
        if queue.incomplete:  # their context was shed (ContextQueue): no block of theirs can be right
            draftable = is_decode & np.fromiter((r not in queue.incomplete for r in req_ids), dtype=bool, count=num_reqs)
        seeded = None
        generators = getattr(sampling_metadata, "generators", None)
        if generators:
            seeded = np.zeros(num_reqs, dtype=bool)
            seeded[[i for i in generators if i < num_reqs]] = True
            queue.protected = {req_ids[i] for i in np.flatnonzero(seeded)}  # they draft K every step
        elif queue.protected:
            queue.protected = set()
        k, q = self.policy.plan(req_ids, draftable, can_shorten=self._same_on_all_ranks, seeded=seeded,
                                num_decode=int(np.count_nonzero(is_decode)))
        self._pending_k = k
        lengths = np.bincount(np.minimum(k[is_decode], k_max), minlength=k_max + 1)
        self.submitted_hist[: len(lengths)] += lengths
        if self._record_lengths is None:
            self._record_lengths = _rank0()
        if self._record_lengths:
            metrics.observe_draft_lengths(lengths)
        return q

    def _idle_plan(self, num_reqs: int, clocks: tuple, sampling_metadata) -> bool:
        """A step of the policy's idle window (``AdaptivePolicy.idle_step``: plain steps to come
        that stay plain whatever their clocks say, while the batch stays near): True, no drafts
        for anyone, and the step's clocks wait for the window's end (``_catch_up``). What it
        saves: host work right after the target forward costs several times what it costs warm
        (its caches are cold: a 5 us piece of Python took 32 us there once and 5.6 us when run
        again at once, session 31, scratch ``calib.py``); the policy's clocks and plan took ~100
        us per plain step at batch 1 on the demo pair, and the clocks handed over in a batch at
        the window's end run warm. False (a seeded request, a drafting call's time to read, or
        the window ended): ``_plan`` goes on."""
        if getattr(sampling_metadata, "generators", None) or self._draft_timing is not None:
            return False
        runner = self._runner
        disc = runner.discard_request_mask.np[:num_reqs]
        num_decode = num_reqs - int(np.count_nonzero(disc))
        inc = self._ctx_queue.incomplete
        draftable = num_decode
        if inc:  # (their context was shed: see _plan)
            req_ids = runner.input_batch.req_ids[:num_reqs]
            if num_decode == num_reqs:
                draftable -= sum(map(inc.__contains__, req_ids))
            else:
                draftable -= sum(1 for r, d in zip(req_ids, disc.tolist()) if not d and r in inc)
        if not self.policy.idle_step(num_reqs, draftable):
            return False
        self._idle_clocks.append(clocks)
        self._count_undrafted(num_decode)
        return True

    def _count_undrafted(self, num_decode: int) -> None:
        """A step planned without ``_plan``'s full path (``_idle_plan``, ``_undraftable_plan``):
        ``num_decode`` requests submitted no drafts (histogram, /metrics), none pending."""
        self.submitted_hist[0] += num_decode
        if self._record_lengths:
            metrics.observe_undrafted(num_decode)
        self._pending_k = None

    def _undraftable_plan(self, inc: set, num_reqs: int, clocks: tuple, sampling_metadata) -> bool:
        """A dormant step whose requests all keep no drafter context (``_close_running``): no
        drafts, and nothing to read for it (``AdaptivePolicy.plan_undraftable``); its clocks wait,
        as an idle window's do (at most ``_MAX_HELD`` of them). False where ``_plan`` must go on: a
        request that may draft, a seeded one, a drafting call's time to read, a probe being
        measured, or a forward that must be the same on every rank."""
        policy, runner = self.policy, self._runner
        if (not policy.dormant or self._draft_timing is not None or policy.measuring_probe or not self._same_on_all_ranks
                or getattr(sampling_metadata, "generators", None)
                or not inc.issuperset(runner.input_batch.req_ids[:num_reqs])):
            return False
        self._idle_clocks.append(clocks)
        if len(self._idle_clocks) >= _MAX_HELD:
            self._catch_up()
        policy.plan_undraftable(num_reqs)
        self._count_undrafted(num_reqs - int(np.count_nonzero(runner.discard_request_mask.np[:num_reqs])))
        return True

    def _catch_up(self) -> None:
        """The clocks of the idle window's steps, handed to the policy in order (nothing read
        them in between: ``AdaptivePolicy._idle_window``)."""
        held = self._idle_clocks
        if held:
            self._idle_clocks = []
            for c in held:
                self.policy.on_step(*c)

    def _observe_draft_time(self) -> None:
        """The previous step's drafter forward with the context K/V write of the tokens that step
        verified (on CPU: its whole drafting call), for T_d. (The context K = 0 steps deferred,
        written before it, is timed by neither T_d nor T_v: what it costs is the price of
        drafting again after not drafting, which the policy measures on its probes,
        ``AdaptivePolicy._measure_probe``.)"""
        t, self._draft_timing = self._draft_timing, None
        if t is None:
            return
        kind, a, b, block_tokens, num_reqs = t
        if kind == "cuda":
            if not b.query():  # never wait: drop the sample
                return
            seconds = a.elapsed_time(b) / 1e3
        else:
            seconds = b - a
        self.policy.on_draft_time(seconds, block_tokens, num_reqs)

    def _skip_forward(self, features, positions, slot_mapping, num_tokens: int, owners=None, checked: bool = False) -> None:
        """The one K = 0 step (every request submits 0 drafts): no drafter forward; the context
        K/V of the tokens just verified is queued, to be written before the next block forward
        (``owners``: the batch's request ids, rows per request and, with prefix caching, each
        request's first position, so that the rows of requests that end first are dropped; None:
        never dropped; ``checked``: only rows ``ContextQueue.kept_rows`` keeps are passed)."""
        self._write_context(features, positions, slot_mapping, num_tokens, defer=True, owners=owners, checked=checked)
        self.num_skipped_forwards += 1

    def _write_context(self, features, positions, slot_mapping, num_tokens: int, defer: bool, owners=None,
                       checked: bool = False) -> None:
        """Context K/V of the tokens the target just ran. Deferred on steps that skip the drafter
        forward (a K = 0 step then costs a plain decode step: on CPU the write's ~20 small ops
        are a fifth of a small model's step) and written, in step order, in one batch before the
        next block forward, without the rows of requests that ended meanwhile (ContextQueue).
        Nothing reads drafter context but our block forward. Bounded in tokens and bytes."""
        queue = self._ctx_queue
        if defer:
            row_bytes = _row_bytes(features)
            limit = min(_MAX_DEFERRED, max(256, _MAX_DEFERRED_BYTES // max(row_bytes, 1)))
            fits = fits_at_once = queue.rows + num_tokens <= limit
            if not fits:
                queue.prune()  # the rows of requests that ended are never written
                # Defer again only once half the limit is free (pruning again a few steps later
                # would cost more than it saves): shed the oldest requests' rows (they are never
                # drafted for again, see ContextQueue) rather than write them; write the live
                # rows now only if that cannot free it (this step's rows alone, or protected ones).
                if queue.rows + num_tokens > limit // 2 and num_tokens <= limit // 2:
                    queue.shed(limit // 2 - num_tokens)
                fits = queue.rows + num_tokens <= limit // 2
            if fits:
                if isinstance(features, _Parts):  # gathered per layer (rows kept, see _plan_then_propose)
                    feats = features if _num_rows(features) == num_tokens else _Parts(p[:num_tokens] for p in features)
                elif features.shape[0] == num_tokens and not features._is_view():
                    feats = features
                else:
                    feats = features[:num_tokens].clone()
                req_ids, counts, *starts = owners if owners is not None else ([""], np.array([num_tokens]))
                # (rows the caller kept by ``kept_rows`` need no second check, unless a shed since
                # made more requests incomplete)
                queue.add(feats, _rows(positions, num_tokens).clone(), _rows(slot_mapping, num_tokens).clone(), req_ids,
                          counts, starts[0] if starts else None, checked=checked and fits_at_once)
                return
        self._flush_queue()
        self.model.write_context_kv(_dense(features)[:num_tokens], positions[:num_tokens], slot_mapping[:num_tokens])

    def _flush_queue(self) -> None:
        """Write the context K/V that K = 0 steps deferred (before any later row, so that a
        reused slot ends with its latest owner's K/V), timed apart (``_flush_s``): the price
        of drafting again after not drafting, which T_d leaves out (see _observe_draft_time).
        One write more than writing the queue and this step's rows at once (~0.3-0.6 ms of
        small ops on CPU), paid only on a drafting step after K = 0 steps."""
        queued = self._ctx_queue.take()
        if queued is not None:
            t = time.perf_counter()
            self.model.write_context_kv(*queued)
            self._flush_s += time.perf_counter() - t

    # -- loading --------------------------------------------------------------------------
    def load_model(self, target_model: torch.nn.Module) -> None:
        target_layers = set(get_layers_from_vllm_config(self.vllm_config, AttentionLayerBase))
        self.model = self._get_model()
        all_layers = get_layers_from_vllm_config(self.vllm_config, AttentionLayerBase)
        self._draft_attn_layer_names = set(all_layers) - target_layers
        if supports_multimodal(target_model):
            target_model = target_model.get_language_model()
        self.model.bind_target(target_model)
        if self.device.type == "cpu":
            # The verify and drafter widths change from step to step under (adaptive)
            # speculation: rows padded to a few dozen widths, so that oneDNN does not build a
            # matmul primitive per row count (fixes/cpu_gemm_widths.py; install reads the off switch).
            from ..fixes import cpu_gemm_widths

            patches.require("cpu-gemm-widths")
            if n := cpu_gemm_widths.install(target_model, self.model):
                logger.info("dflash-vllm: %d oneDNN linears of the target and drafter run at padded row counts "
                            "(DFLASH_VLLM_CPU_GEMM_WIDTHS=0: exact)", n)
                self.policy.width = cpu_gemm_widths.bucket  # drafts within a padded width are free

    # -- the step --------------------------------------------------------------------------
    def propose(
        self,
        num_speculative_tokens: int,
        target_token_ids: torch.Tensor,  # [num_tokens]
        target_positions: torch.Tensor,  # [num_tokens]
        target_hidden_states: torch.Tensor,  # [num_tokens, n_target_layers * H]
        next_token_ids: torch.Tensor,  # [num_reqs] the anchors
        token_indices_to_sample: torch.Tensor | None,
        common_attn_metadata: CommonAttentionMetadata,
        sampling_metadata,
        mm_embed_inputs=None,
        num_rejected_tokens_gpu: torch.Tensor | None = None,  # [num_reqs]
        slot_mappings=None,
    ) -> torch.Tensor:
        # The base class's propose() is EAGLE's (one query per request, K chained forwards); this
        # one maps onto vLLM's native DFlash step instead: its set_inputs_first_pass is our
        # _write_context (context K/V, deferred on K = 0 steps) plus the DraftBlockMetadata
        # below; then one block forward and the draft sampling (_sample_draft_tokens). The
        # adaptive plan (_plan) comes first, because it decides whether the forward runs at all.
        self.num_speculative_tokens = num_speculative_tokens
        self._last_draft_probs = None
        cad = common_attn_metadata
        num_reqs, num_tokens = cad.num_reqs, target_token_ids.shape[0]

        k = num_speculative_tokens
        rows = None  # the requests the block forward runs for: None, all of them
        if k and self.policy_active:
            k, self._planned_q = self._planned_q, None
            if k is None:  # not planned by _plan_then_propose (a caller other than the runner's step)
                k = self._plan(num_reqs, num_tokens, num_speculative_tokens, sampling_metadata)
            rows = self._drafting_rows(num_reqs)
        if k == 0:  # every request submits 0 drafts (reached here under async scheduling or another caller)
            self._skip_forward(target_hidden_states, target_positions, cad.slot_mapping, num_tokens)
            return torch.empty(num_reqs, 0, dtype=torch.int64, device=self.device)
        t_start = self._begin_draft(target_hidden_states, target_positions, cad.slot_mapping, num_tokens)

        ctx_lens = cad.seq_lens[:num_reqs]
        if num_rejected_tokens_gpu is not None:
            ctx_lens = ctx_lens - num_rejected_tokens_gpu[:num_reqs]
        anchors, block_table, n = next_token_ids[:num_reqs], cad.block_table_tensor, num_reqs
        if rows is not None:  # only the requests that submit drafts (see _drafting_rows)
            idx = torch.from_numpy(rows).to(self.device)
            ctx_lens, anchors, block_table, n = ctx_lens[idx], anchors[idx], block_table[idx], len(rows)
        q_len = k + 1
        # [n, K+1]; near max_model_len the tail positions are clamped: those drafts
        # can never be accepted (the request ends first), they only need valid RoPE rows.
        positions = (ctx_lens[:, None] + self._block_offsets[:q_len]).clamp_max(self.max_model_len - 1)

        query_start_loc = self.arange[: n + 1] * q_len
        block_cad = DraftBlockMetadata(
            query_start_loc=query_start_loc,
            query_start_loc_cpu=torch.from_numpy(self.token_arange_np[: n + 1] * q_len),  # no device sync
            seq_lens=ctx_lens + q_len,
            num_reqs=n,
            num_actual_tokens=n * q_len,
            max_query_len=q_len,
            max_seq_len=cad.max_seq_len + q_len,  # an upper bound on every ctx_len + q_len; no host sync
            block_table_tensor=block_table,
            slot_mapping=cad.slot_mapping[:0],
            causal=False,
            context_lens=ctx_lens,
        )
        _, per_layer_metadata = self.build_per_group_and_layer_attn_metadata(block_cad)
        with set_forward_context(per_layer_metadata, self.vllm_config, num_tokens=n * q_len):
            # [n * K, H]: the mask rows only (the last layer drops the anchors after attention)
            mask_hidden = self.model.forward_block(anchors, positions.view(-1), q_len)
        draft_ids, draft_probs = self._sample_draft_tokens(mask_hidden, sampling_metadata, rows)
        self._end_draft(t_start, n * q_len, num_reqs)
        draft_ids = draft_ids.view(n, k)
        if rows is not None:  # the other rows submit none of theirs (_submit cuts them to 0)
            draft_ids = draft_ids.new_zeros(num_reqs, k).index_copy_(0, idx, draft_ids)
        if draft_probs is not None:
            draft_probs = draft_probs.view(n, k, -1)
            if rows is not None:
                draft_probs = draft_probs.new_zeros(num_reqs, *draft_probs.shape[1:]).index_copy_(0, idx, draft_probs)
            self._last_draft_probs = draft_probs
        return draft_ids

    def _drafting_rows(self, num_reqs: int) -> np.ndarray | None:
        """The rows whose planned length is above 0, when some are not: the block forward runs
        for those only (a request's block reads its own context and its own block alone, so
        theirs come out the same). None: every row (all draft, or the forward must be the same
        on every rank: tensor parallelism with the adaptive policy). At batch 64 on a workload
        the drafter does not know, most requests' context was shed (ContextQueue) and a probe
        drafts for the few others; the forward used to run all 64 blocks regardless."""
        k = self._pending_k
        if k is None or len(k) != num_reqs or not self._same_on_all_ranks or self._ctx_queue.protected:
            return None  # (seeded requests: their drafts from the whole batch's forward, as always)
        rows = np.flatnonzero(k)
        return rows if 0 < len(rows) < num_reqs else None

    def _begin_draft(self, features, positions, slot_mapping, num_tokens: int):
        """A drafting call's context write and T_d's start: every verified token's context K/V
        is written before any later block reads it; T_d times this step's own rows, not the
        ones K = 0 steps deferred (written first, see _flush_queue)."""
        self._flush_queue()
        if self.device.type == "cuda":
            t_start = torch.cuda.Event(enable_timing=True)
            t_start.record()
        else:
            t_start = time.perf_counter()
        self._write_context(features, positions, slot_mapping, num_tokens, defer=False)
        self.num_drafter_forwards += 1
        return t_start

    def _end_draft(self, t_start, block_tokens: int, num_reqs: int) -> None:
        """T_d's end (read at the next step's plan, _observe_draft_time), for a block of
        ``block_tokens`` in a step of ``num_reqs`` requests."""
        if self.device.type == "cuda":  # read back at the next step, when it has long completed: no sync
            t_end = torch.cuda.Event(enable_timing=True)
            t_end.record()
            self._draft_timing = ("cuda", t_start, t_end, block_tokens, num_reqs)
        else:
            self._draft_timing = ("cpu", t_start, time.perf_counter(), block_tokens, num_reqs)

    def _sample_draft_tokens(self, hidden_states: torch.Tensor, sampling_metadata, rows: np.ndarray | None = None):
        """Drafts and their law q: greedy rows take the argmax (q unused: vLLM compares argmaxes);
        sampled rows draw from q = softmax(top-k/top-p(logits / T)), the request's own
        processing, so q puts no mass where the target's p cannot (higher acceptance than
        temperature-only q, same exactness). Seeded requests draw with their own generator,
        which makes them reproducible run to run with speculation on. ``rows``: the batch rows
        the blocks belong to (None: all, in order)."""
        if not self._enable_probabilistic_draft_probs or sampling_metadata.all_greedy:
            return row_argmax(self.model.compute_logits(hidden_states)), None
        from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

        logits = self.model.compute_logits(hidden_states).float()  # [n * K, V]
        sel = None if rows is None else torch.from_numpy(rows).to(logits.device)  # once, for every per-row tensor
        per_row = (lambda t: t) if sel is None else (lambda t: t[sel])
        temperature = per_row(sampling_metadata.temperature)
        k = logits.shape[0] // temperature.shape[0]
        temperature = temperature.repeat_interleave(k)
        greedy = temperature < 1e-5
        logits = logits / torch.where(greedy, 1.0, temperature)[:, None]
        top_k = None if sampling_metadata.top_k is None else per_row(sampling_metadata.top_k).repeat_interleave(k)
        top_p = None if sampling_metadata.top_p is None else per_row(sampling_metadata.top_p).repeat_interleave(k)
        q = apply_top_k_top_p(logits, top_k, top_p).softmax(dim=-1)
        # Exponential race: argmax(q / E), E ~ Exp(1), is a draw from q.
        noise = torch.empty_like(q).exponential_()
        where = {int(r): i for i, r in enumerate(rows)} if rows is not None else None
        for req_idx, gen in sampling_metadata.generators.items():
            i = req_idx if where is None else where.get(req_idx)
            if i is not None:
                noise[i * k : (i + 1) * k].exponential_(generator=gen)
        drafts = row_argmax(q / noise)
        drafts = torch.where(greedy, row_argmax(q), drafts)
        return drafts, q

    @torch.inference_mode()
    def dummy_run(self, num_tokens: int, use_cudagraphs: bool = True, is_graph_capturing: bool = False, slot_mappings=None) -> None:
        """Memory profiling: the context projection at full width, one block forward."""
        features = torch.zeros(num_tokens, self.model.fc.input_size, dtype=self.dtype, device=self.device)
        positions = torch.zeros(num_tokens, dtype=torch.int64, device=self.device)
        self.model.write_context_kv(features, positions, None)
        num_query = min(num_tokens, self.max_batch_size * self.max_query_len)
        with set_forward_context(None, self.vllm_config, num_tokens=num_query):
            self.model(self.input_ids[:num_query], positions[:num_query])


def row_argmax(x: torch.Tensor) -> torch.Tensor:
    """``x.argmax(-1)``. On CPU through ``max(-1)``, which returns the same index (the first
    maximum; NaN wins in both) 2.5x faster: 0.25 against 0.64 ms for 960 x 801 fp32 logits on 2
    cores, the demo pair's 1024-token block at concurrency 64 (session 27)."""
    return x.argmax(dim=-1) if x.is_cuda else x.max(dim=-1).indices


def _after(fn, hook):
    """fn, then hook(result, *args) (errors in the hook are logged once, never raised)."""
    failed = []

    def wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        try:
            hook(result, *args, **kwargs)
        except Exception:  # the policy is an optimisation: serving goes on without its update
            if not failed:
                failed.append(True)
                logger.exception("dflash-vllm: adaptive drafting could not observe a step")
        return result

    return wrapper


def _plain_steps_patchable(runner) -> bool:
    """Whether steps without drafts may take vLLM's plain-decode input path: not for hybrid
    (recurrent) targets, whose decode rows read a speculative offset even with 0 drafts."""
    if getattr(runner.model_config, "is_hybrid", True):
        return False
    patches.require("plain-step-shortcut")
    import inspect

    src = inspect.getsource(type(runner)._prepare_inputs)
    assert "use_spec_decode = self.speculative_config is not None" in src, (
        "vLLM's _prepare_inputs no longer decides spec decoding from self.speculative_config; "
        "re-check _plain_when_undrafted in dflash_vllm/proposers/dflash.py against this vLLM version")
    return True


def _plain_when_undrafted(runner, prepare_inputs):
    """``runner._prepare_inputs`` for a step with no draft scheduled (every request submitted 0,
    or only prefills): prepared as a no-speculation engine prepares it (logits at each
    request's last token, vLLM's Sampler), instead of a 0-draft rejection-sampling step
    (spec-decode metadata, rejection sampler: ~0.6 ms of host work on CPU). The sampled
    tokens are the same: with no draft, the rejection sampler's only token is the bonus one,
    which it draws with the same Sampler. The drafter still gets its common attention
    metadata (built outside this method)."""

    def wrapper(scheduler_output, *args, **kwargs):
        if scheduler_output.scheduled_spec_decode_tokens:
            return prepare_inputs(scheduler_output, *args, **kwargs)
        spec = runner.speculative_config
        runner.speculative_config = None  # read once, as `use_spec_decode`, in this method only
        try:
            return prepare_inputs(scheduler_output, *args, **kwargs)
        finally:
            runner.speculative_config = spec

    return wrapper


def _rank0() -> bool:
    try:
        from vllm.distributed import get_tensor_model_parallel_rank

        return get_tensor_model_parallel_rank() == 0
    except Exception:  # no distributed state (single process)
        return True
