"""A small continuous-batching server: requests arrive, join the running batch when blocks are free, leave when done.

Orca (Yu et al., 2022) calls it **iteration-level scheduling**: the scheduler decides again at every
step (one forward of the model) which sequences run. A finished sequence leaves at once and gives its
blocks back, and a waiting request joins at the next step, its whole prompt run in the same forward as
the other sequences' newest tokens. **Static batching**, the older way, forms a batch, runs it until
its longest request is done, and only then takes the next requests.

The admission rule keeps every running sequence safe: a waiting request (first come, first served)
joins only when the pool's free blocks, less the blocks the running sequences may still take before
they finish, cover everything it may take (``prompt + max_new_tokens - 1`` positions). A running
sequence therefore never finds the pool empty and no block is ever taken from it; a request that does
not fit waits. (vLLM admits more eagerly and, when the pool runs out, pre-empts a sequence: it frees
its blocks and recomputes or swaps them in later. That is left out here.)

Decoding is greedy, and a request's tokens are the ones ``generate(model, prompt, max_new_tokens,
temperature=0, use_cache=True)`` gives it alone (the tests check it on many random mixes).
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

import torch

from .. import validation
from ..i18n import _
from .batched_forward import check_servable, inference_settings, make_batch, paged_forward
from .paged_cache import CacheSnapshot, PagedKVCache, blocks_for

__all__ = ["Request", "Finished", "StepRecord", "Scheduler", "POLICIES", "serve", "positions_needed"]

POLICIES = ("continuous", "static")


def positions_needed(prompt_len: int, max_new_tokens: int) -> int:
    """Positions a request holds in the cache at its end: the prompt and every new token but the last.

    The last token is returned, never fed back, so its key and value are never computed.
    """
    return prompt_len + max_new_tokens - 1


@dataclass(frozen=True)
class Request:
    """A prompt (token ids) and how many tokens to generate; it arrives at step ``arrival``."""

    request_id: Hashable
    prompt: tuple[int, ...]
    max_new_tokens: int
    arrival: int = 0

    def __post_init__(self) -> None:
        validation.check_instance("request_id", self.request_id, (str, int))
        if isinstance(self.request_id, bool):
            raise TypeError(f"request_id={self.request_id!r} must be a str or an int, got bool")
        prompt = self.prompt
        if isinstance(prompt, torch.Tensor):
            if prompt.dim() != 1 or prompt.is_floating_point() or prompt.is_complex() or prompt.dtype == torch.bool:
                raise TypeError(f"prompt must be a 1-D tensor of integer token ids, got dtype {prompt.dtype} and "
                                f"shape {tuple(prompt.shape)}")
            prompt = prompt.tolist()
        if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Iterable):
            raise TypeError(f"prompt must be a sequence of token ids (a list of ints), got {type(prompt).__name__}")
        prompt = tuple(prompt)
        for t in prompt:
            validation.check_int("prompt token", t, minimum=0, rule=">= 0 (a token id)")
        if not prompt:
            raise ValueError(f"request {self.request_id!r} has an empty prompt; give at least one token")
        object.__setattr__(self, "prompt", tuple(int(t) for t in prompt))
        validation.check_int("max_new_tokens", self.max_new_tokens, minimum=1, rule=">= 1 (a request asks for tokens)")
        validation.check_int("arrival", self.arrival, minimum=0, rule=">= 0 (a step number)")


@dataclass
class Finished:
    """A served request: its tokens and when it arrived, started and finished (step numbers and seconds)."""

    request: Request
    tokens: list[int]
    admitted_step: int
    finished_step: int
    arrival_time: float  # seconds since the run started, when its arrival step began
    finished_time: float  # seconds since the run started, when its last token was out

    @property
    def steps(self) -> int:
        """Steps from arrival to the last token, both counted: its latency in steps."""
        return self.finished_step - self.request.arrival + 1

    @property
    def waited_steps(self) -> int:
        return self.admitted_step - self.request.arrival

    @property
    def seconds(self) -> float:
        return self.finished_time - self.arrival_time


@dataclass
class StepRecord:
    """What one step did: who joined, who ran, who left, and the pool afterwards."""

    step: int
    admitted: list[Hashable]
    running: list[Hashable]
    finished: list[Hashable]
    rows: int  # tokens in the step's forward (prompts of the joining requests, one per running sequence)
    free_blocks: int
    positions_used: int
    positions_held: int
    snapshot: CacheSnapshot | None = None


@dataclass
class _Running:
    request: Request
    admitted_step: int
    arrival_time: float
    tokens: list[int] = field(default_factory=list)


class Scheduler:
    """Serve requests with ``model`` from a paged cache of ``num_blocks`` blocks of ``tokens_per_block`` positions.

    ``policy="continuous"`` (iteration-level scheduling) admits waiting requests at every step while the
    admission rule allows; ``policy="static"`` admits a new batch only when the previous one has finished.
    ``max_batch_size`` caps the sequences that run together (``None``: only the pool limits it).
    :meth:`submit` requests (all checked at once), then :meth:`run`, or :meth:`step` one at a time.
    ``record=True`` keeps a :class:`CacheSnapshot` of the pool after every step (for figures and explorers).
    """

    def __init__(self, model: torch.nn.Module, num_blocks: int, tokens_per_block: int = 16,
                 max_batch_size: int | None = None, policy: str = "continuous", record: bool = False,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        check_servable(model)
        validation.check_positive_int("num_blocks", num_blocks)
        validation.check_positive_int("tokens_per_block", tokens_per_block)
        if max_batch_size is not None:
            validation.check_positive_int("max_batch_size", max_batch_size)
        validation.check_choice("policy", policy, POLICIES)
        validation.check_bool("record", record)
        if not callable(clock):
            raise TypeError(f"clock must be a function returning seconds (like time.perf_counter), got {clock!r:.60}")
        self.model, self.policy, self.max_batch_size, self.record, self.clock = (
            model, policy, max_batch_size, record, clock)
        self.cache = PagedKVCache.for_model(model, num_blocks, tokens_per_block)
        self.step_number = 0
        self.pending: list[Request] = []  # submitted, arriving at a later step
        self.waiting: deque[tuple[Request, float]] = deque()  # arrived (and when), not admitted yet: first come, first served
        self.running: dict[Hashable, _Running] = {}
        self.finished: dict[Hashable, Finished] = {}
        self.history: list[StepRecord] = []
        self._ids: set[Hashable] = set()
        self._start: float | None = None

    # ---------------------------------------------------------------- requests
    def submit(self, requests: Request | Iterable[Request]) -> None:
        """Queue one request or several; every one is checked before any is queued."""
        batch = [requests] if isinstance(requests, Request) else list(requests)
        block_size = self.model.config.block_size
        vocab_size = self.model.config.vocab_size
        cache = self.cache
        seen: set[Hashable] = set()
        for r in batch:
            validation.check_instance("request", r, Request)
            if r.request_id in self._ids or r.request_id in seen:
                raise ValueError(_("request_id={id} is already used by another request; each request needs its own "
                                   "id (its tokens are returned under it)").format(id=repr(r.request_id)))
            seen.add(r.request_id)
            bad = next((t for t in r.prompt if t >= vocab_size), None)
            if bad is not None:
                raise ValueError(_("request {id}: prompt holds token id {bad}, out of range: ids must be in "
                                   "[0, vocab_size={vocab_size})").format(id=repr(r.request_id), bad=bad,
                                                                          vocab_size=vocab_size))
            if len(r.prompt) > block_size:
                raise ValueError(_("request {id}: its prompt has {n} tokens, longer than the model's "
                                   "block_size={block_size}; crop it to the last {block_size} tokens").format(
                                       id=repr(r.request_id), n=len(r.prompt), block_size=block_size))
            need = positions_needed(len(r.prompt), r.max_new_tokens)
            if need > block_size:
                raise ValueError(_(
                    "request {id}: a prompt of {n} tokens and max_new_tokens={new} need {need} positions of context "
                    "(prompt + max_new_tokens - 1), more than block_size={block_size}; this server does not slide "
                    "the window: ask for at most {most} new tokens").format(
                        id=repr(r.request_id), n=len(r.prompt), new=r.max_new_tokens, need=need,
                        block_size=block_size, most=block_size - len(r.prompt) + 1))
            blocks = blocks_for(need, cache.tokens_per_block)
            if blocks > cache.num_blocks:
                raise ValueError(_(
                    "request {id} needs {need} positions ({blocks} blocks of {tpb}), but the whole pool has "
                    "num_blocks={num_blocks}: it could never run; make the pool larger").format(
                        id=repr(r.request_id), need=need, blocks=blocks, tpb=cache.tokens_per_block,
                        num_blocks=cache.num_blocks))
            if r.arrival < self.step_number:
                raise ValueError(_("request {id} arrives at step {arrival}, but the scheduler is already at step "
                                   "{step}; use arrival >= {step}").format(id=repr(r.request_id), arrival=r.arrival,
                                                                           step=self.step_number))
        self._ids |= seen
        self.pending.extend(batch)
        self.pending.sort(key=lambda r: r.arrival)  # stable: same arrival, submission order

    @property
    def done(self) -> bool:
        return not (self.pending or self.waiting or self.running)

    def _blocks_promised(self) -> int:
        """Blocks the running sequences may still take before they finish."""
        tpb = self.cache.tokens_per_block
        return sum(blocks_for(positions_needed(len(s.request.prompt), s.request.max_new_tokens), tpb)
                   - len(self.cache.tables[rid]) for rid, s in self.running.items())

    def _fits(self, r: Request, promised: int) -> bool:
        need = blocks_for(positions_needed(len(r.prompt), r.max_new_tokens), self.cache.tokens_per_block)
        return need <= self.cache.num_free_blocks - promised

    def _admit(self) -> list[Hashable]:
        if self.policy == "static" and self.running:
            return []  # static batching: the batch runs to its end before anyone joins
        admitted: list[Hashable] = []
        if not self.waiting:
            return admitted
        promised = self._blocks_promised()
        while self.waiting and (self.max_batch_size is None or len(self.running) < self.max_batch_size):
            r, arrival_time = self.waiting[0]
            if not self._fits(r, promised):
                break  # first come, first served: nobody overtakes the request at the head of the queue
            self.waiting.popleft()
            self.cache.add_sequence(r.request_id)
            promised += blocks_for(positions_needed(len(r.prompt), r.max_new_tokens), self.cache.tokens_per_block)
            self.running[r.request_id] = _Running(r, self.step_number, arrival_time)
            admitted.append(r.request_id)
        return admitted

    # ---------------------------------------------------------------- steps
    def _now(self) -> float:
        if self._start is None:
            self._start = self.clock()
        return self.clock() - self._start

    def step(self) -> StepRecord:
        """One iteration: arrivals, admissions, one forward of every running sequence, departures."""
        if self.done:
            raise ValueError("there is nothing to run: every submitted request has finished; submit more first")
        with inference_settings(self.model):
            return self._step()

    def _step(self) -> StepRecord:
        step_start = self._now()
        while self.pending and self.pending[0].arrival <= self.step_number:
            self.waiting.append((self.pending.pop(0), step_start))
        admitted = self._admit()
        new_tokens = {rid: (list(s.request.prompt) if not s.tokens else s.tokens[-1:])
                      for rid, s in self.running.items()}
        finished: list[Hashable] = []
        rows = sum(len(t) for t in new_tokens.values())
        if new_tokens:
            batch = make_batch(self.cache, new_tokens)
            logits = validation.check_finite_logits("logits", paged_forward(self.model, self.cache, batch))
            next_ids = logits.argmax(dim=-1).tolist()  # greedy
            now = self._now()
            for rid, token in zip(batch.seq_ids, next_ids):
                s = self.running[rid]
                s.tokens.append(int(token))
                if len(s.tokens) == s.request.max_new_tokens:
                    self.cache.free_sequence(rid)  # its blocks are free for the next step's admissions
                    del self.running[rid]
                    self.finished[rid] = Finished(s.request, s.tokens, s.admitted_step, self.step_number,
                                                  s.arrival_time, now)
                    finished.append(rid)
        record = StepRecord(self.step_number, admitted, list(new_tokens), finished, rows, self.cache.num_free_blocks,
                            self.cache.positions_used(), self.cache.positions_held(),
                            self.cache.snapshot() if self.record else None)
        self.history.append(record)
        self.step_number += 1
        if not self.running and not self.waiting and self.pending:
            self.step_number = self.pending[0].arrival  # nothing to do until the next request arrives
        return record

    def run(self) -> dict[Hashable, Finished]:
        """Step until every submitted request has finished; return them by id, in the order they finished."""
        with inference_settings(self.model):
            while not self.done:
                self._step()
        return dict(self.finished)


def serve(model: torch.nn.Module, requests: Sequence[Request], num_blocks: int, tokens_per_block: int = 16,
          **options) -> tuple[dict[Hashable, Finished], Scheduler]:
    """Submit ``requests`` to a new :class:`Scheduler` (``options``: policy, max_batch_size, ...) and run them all."""
    scheduler = Scheduler(model, num_blocks, tokens_per_block, **options)
    scheduler.submit(requests)
    return scheduler.run(), scheduler
