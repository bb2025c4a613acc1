"""Serving (lesson 15): the paged cache's bookkeeping, attention through block tables, the scheduler.

* every greedy output equals ``generate`` on the request alone, on many seeded random request mixes;
* the pool's accounting holds after any seeded random sequence of arrivals, growth and finishes
  (no block leaked, none shared, none both free and held), and no sequence's stored keys change
  when others grow or finish;
* a slot nothing was written to is never read (the pool starts filled with NaN);
* every error has a test.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys

import matplotlib.pyplot as plt
import pytest
import torch

from gpt_lesson import GPT
from gpt_lesson.sampling import generate
from gpt_lesson.serving import (
    PagedKVCache,
    PoolFullError,
    Request,
    Scheduler,
    blocks_for,
    bytes_per_position,
    free_sequence_blocks,
    grow_table,
    locate,
    make_batch,
    paged_attention,
    paged_forward,
    plot_block_tables,
    plot_timeline,
    positions_needed,
    serve,
    time_decode_step,
    time_prefill_and_decode,
)

VOCAB = 23


def random_model(seed: int = 0, dtype: torch.dtype = torch.float64, block_size: int = 24, n_layer: int = 2,
                 **options) -> GPT:
    """A small GPT with weights large enough that its greedy tokens depend on the whole context."""
    torch.manual_seed(seed)
    model = GPT(VOCAB, 32, 4, n_layer, block_size, dropout=0.0, **options).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.4)
    return model.eval()


def alone(model: GPT, r: Request) -> list[int]:
    """The request's tokens from the course's generate, on its own."""
    out = generate(model, torch.tensor([r.prompt]), r.max_new_tokens, temperature=0, use_cache=True)
    return out[0, len(r.prompt):].tolist()


def random_requests(rng: random.Random, n: int, block_size: int, max_arrival: int = 0, start: int = 0
                    ) -> list[Request]:
    out = []
    for i in range(n):
        prompt_len = rng.randint(1, block_size)
        new = rng.randint(1, block_size - prompt_len + 1)
        out.append(Request(start + i, [rng.randrange(VOCAB) for _ in range(prompt_len)], new,
                           arrival=rng.randint(0, max_arrival)))
    return out


# ------------------------------------------------------------------------------ the three list operations
def test_locate_goes_through_the_block_table():
    table = [7, 2, 9]
    assert locate(table, 0, 4) == (7, 0)
    assert locate(table, 3, 4) == (7, 3)
    assert locate(table, 4, 4) == (2, 0)
    assert locate(table, 11, 4) == (9, 3)
    assert [locate(table, p, 4)[0] for p in range(12)] == [7] * 4 + [2] * 4 + [9] * 4


def test_locate_refuses_a_position_past_the_table():
    with pytest.raises(ValueError, match=r"position=12 is in logical block 3, but the block table has 3"):
        locate([7, 2, 9], 12, 4)
    with pytest.raises(ValueError, match="position=-1 must be >= 0"):
        locate([7], -1, 4)
    with pytest.raises(TypeError, match="position=1.0 must be an integer"):
        locate([7], 1.0, 4)
    with pytest.raises(ValueError, match="tokens_per_block=0 must be a positive integer"):
        locate([7], 0, 0)


@pytest.mark.parametrize("length, new_length, taken", [
    (0, 1, [5]), (0, 4, [5]), (0, 5, [5, 1]), (3, 4, []), (4, 5, [5]), (4, 8, [5]), (4, 9, [5, 1]), (9, 9, []),
])
def test_grow_table_takes_a_block_only_at_a_boundary(length, new_length, taken):
    table = list(range(100, 100 + blocks_for(length, 4)))
    free = [5, 1, 8]
    new_table, new_free = grow_table(table, new_length, 4, free)
    assert new_table == table + taken
    assert new_free == [5, 1, 8][len(taken):]
    assert table == list(range(100, 100 + blocks_for(length, 4))) and free == [5, 1, 8]  # the inputs are unchanged


def test_grow_table_never_shrinks():
    assert grow_table([3, 4], 1, 4, (0,)) == ([3, 4], [0])


def test_grow_table_refuses_when_the_pool_is_short():
    with pytest.raises(PoolFullError, match=r"new_length=9 needs 2 more block\(s\) of 4 positions, but the pool has 1"):
        grow_table([3], 9, 4, [0])
    assert issubclass(PoolFullError, ValueError)


def test_free_sequence_blocks_gives_every_block_back_and_drops_the_table():
    tables, free = {"a": [3, 0, 6], "b": [1]}, [2, 5]
    assert free_sequence_blocks(tables, free, "a") == ({"b": [1]}, [2, 5, 3, 0, 6])
    assert tables == {"a": [3, 0, 6], "b": [1]} and free == [2, 5]  # the inputs are unchanged
    assert free_sequence_blocks({"e": []}, (4,), "e") == ({}, [4])  # a sequence that never got a block
    with pytest.raises(ValueError, match="sequence 'c' has no block table"):
        free_sequence_blocks(tables, free, "c")


def test_blocks_for_and_bytes_per_position():
    assert [blocks_for(n, 4) for n in range(10)] == [0, 1, 1, 1, 1, 2, 2, 2, 2, 3]
    assert bytes_per_position(4, 128) == 2 * 4 * 128 * 4 == 4096
    assert bytes_per_position(2, 32, 8) == 1024
    with pytest.raises(ValueError, match="n_positions=-1 must be >= 0"):
        blocks_for(-1, 4)
    with pytest.raises(ValueError, match="n_layer=0 must be a positive integer"):
        bytes_per_position(0, 128)


# ------------------------------------------------------------------------------ the cache
def test_cache_shapes_and_sizes():
    model = random_model(dtype=torch.float32)
    cache = PagedKVCache.for_model(model, num_blocks=10, tokens_per_block=4)
    assert cache.kv.shape == (2, 40, 2, 4, 8) and cache.k.shape == cache.v.shape == (2, 40, 4, 8)
    assert cache.k.dtype == torch.float32
    cache.kv[1, 7, 0, 2, 3], cache.kv[1, 7, 1, 2, 3] = 5.0, 6.0  # k and v are views of kv
    assert (cache.k[1, 7, 2, 3], cache.v[1, 7, 2, 3]) == (5.0, 6.0)
    assert cache.bytes_per_block == 4 * bytes_per_position(2, 32)
    assert cache.nbytes == cache.kv.numel() * 4 == 10 * cache.bytes_per_block
    assert PagedKVCache.for_model(random_model(), 3).k.dtype == torch.float64


def test_cache_grows_frees_and_reuses_blocks():
    cache = PagedKVCache(1, 1, 2, num_blocks=6, tokens_per_block=4)
    cache.add_sequence("a")
    cache.add_sequence("b")
    assert cache.append("a", 5) == [0, 1, 2, 3, 4]  # blocks 0 and 1
    assert cache.append("b", 2) == [8, 9]  # block 2
    assert cache.append("a", 4) == [5, 6, 7, 12]  # fills block 1, then block 3
    assert cache.tables == {"a": [0, 1, 3], "b": [2]} and cache.free_blocks == [4, 5]
    assert cache.slots("a") == [0, 1, 2, 3, 4, 5, 6, 7, 12]
    assert cache.slots("a", 7, 9) == [7, 12]
    assert (cache.positions_used(), cache.positions_held()) == (11, 16)
    assert cache.free_sequence("a") == [0, 1, 3]
    assert cache.free_blocks == [4, 5, 0, 1, 3] and cache.num_free_blocks == 5
    cache.add_sequence("c")
    assert cache.append("c", 1) == [16]  # block 4: the front of the free list
    cache.check_accounting()
    snap = cache.snapshot()
    assert snap.tables == {"b": (2,), "c": (4,)} and snap.lengths == {"b": 2, "c": 1}
    assert snap.owner() == {2: "b", 4: "c"} and snap.free_blocks == (5, 0, 1, 3)


def test_cache_errors():
    cache = PagedKVCache(1, 1, 2, num_blocks=2, tokens_per_block=4)
    cache.add_sequence(0)
    with pytest.raises(ValueError, match=r"positions 0..2 are not all held by sequence 0 \(it holds 0 positions\)"):
        cache.slots(0, 0, 3)
    with pytest.raises(ValueError, match="sequence 0 is already in the cache"):
        cache.add_sequence(0)
    with pytest.raises(ValueError, match="sequence 'x' is not in the cache"):
        cache.append("x", 1)
    with pytest.raises(ValueError, match="sequence 'x' is not in the cache"):
        cache.free_sequence("x")
    with pytest.raises(ValueError, match="n=-2 must be >= 0"):
        cache.append(0, -2)
    with pytest.raises(PoolFullError, match=r"needs 3 more block\(s\) of 4 positions, but the pool has 2 free"):
        cache.append(0, 9)
    assert cache.length(0) == 0 and cache.tables[0] == [] and cache.free_blocks == [0, 1]
    with pytest.raises(ValueError, match="num_blocks=0 must be a positive integer"):
        PagedKVCache(1, 1, 2, num_blocks=0)
    with pytest.raises(TypeError, match="tokens_per_block=2.5 must be an integer"):
        PagedKVCache(1, 1, 2, num_blocks=2, tokens_per_block=2.5)


@pytest.mark.parametrize("corrupt, message", [
    (lambda c: c.tables["b"].__setitem__(0, c.tables["a"][0]), "is in the tables of both 'a' and 'b'"),
    (lambda c: c.free_blocks.append(c.tables["a"][0]), "is both free and held by 'a'"),
    (lambda c: c.free_blocks.pop(), "neither free nor held: they leaked"),
    (lambda c: c.free_blocks.append(c.free_blocks[0]), "on the free list twice"),
    (lambda c: c.lengths.update(a=1), "holds 1 positions in 2 block"),
    (lambda c: c.free_blocks.append(99), "block 99 is not a block of this pool"),
    (lambda c: c.tables.update(a=c.tables["a"][::-1]), r"the slots of sequence 'a' no longer follow its block table"),
])
def test_check_accounting_finds_each_kind_of_corruption(corrupt, message):
    cache = PagedKVCache(1, 1, 2, num_blocks=6, tokens_per_block=4)
    for seq, n in (("a", 6), ("b", 3)):
        cache.add_sequence(seq)
        cache.append(seq, n)
    cache.check_accounting()
    corrupt(cache)
    with pytest.raises(ValueError, match=message):
        cache.check_accounting()


@pytest.mark.parametrize("seed", range(40))
def test_random_arrivals_and_finishes_keep_the_pool_sound(seed):
    """Random adds, growth and frees: after every operation each block is free or held by one sequence,
    and every live sequence still reads back exactly the values written for it."""
    rng = random.Random(seed)
    tpb = rng.choice([1, 2, 3, 4, 16])
    cache = PagedKVCache(2, 1, 1, num_blocks=rng.randint(1, 12), tokens_per_block=tpb)
    written: dict[int, list[float]] = {}
    next_id = 0
    for _ in range(150):
        op = rng.random()
        if op < 0.3 or not written:
            cache.add_sequence(next_id)
            written[next_id] = []
            next_id += 1
        elif op < 0.8:
            seq = rng.choice(sorted(written))
            n = rng.randint(0, 2 * tpb + 1)
            free_before, table_before = list(cache.free_blocks), list(cache.tables[seq])
            try:
                slots = cache.append(seq, n)
            except PoolFullError:
                assert blocks_for(len(written[seq]) + n, tpb) - len(table_before) > len(free_before)
                assert cache.free_blocks == free_before and cache.tables[seq] == table_before
                continue
            values = [float(rng.randrange(1, 2**24)) for _ in range(n)]  # exact in float32
            if slots:
                cache.k[:, slots, 0, 0] = torch.tensor(values)
            written[seq] += values
        else:
            seq = rng.choice(sorted(written))
            table = list(cache.tables[seq])
            assert cache.free_sequence(seq) == table
            assert cache.free_blocks[len(cache.free_blocks) - len(table):] == table  # back onto the end of the list
            del written[seq]
        cache.check_accounting()
        assert cache.positions_used() == sum(len(v) for v in written.values())
        assert cache.positions_held() - cache.positions_used() <= (tpb - 1) * len(written)  # < one block each
        for seq, values in written.items():
            assert cache.k[1, cache.slots(seq), 0, 0].tolist() == values
    for seq in list(written):
        cache.free_sequence(seq)
    cache.check_accounting()
    assert sorted(cache.free_blocks) == list(range(cache.num_blocks))


# ------------------------------------------------------------------------------ one batched step
def test_make_batch_lists_each_querys_keys_through_its_table():
    cache = PagedKVCache(1, 1, 1, num_blocks=8, tokens_per_block=2)
    for seq, n in (("a", 3), ("b", 0)):
        cache.add_sequence(seq)
        cache.append(seq, n)  # a: blocks 0, 1 (slots 0, 1, 2)
    batch = make_batch(cache, {"a": [5], "b": [7, 8]})  # a's 4th token (slot 3); b's prompt in block 2
    assert batch.seq_ids == ["a", "b"]
    assert batch.tokens.tolist() == [5, 7, 8]
    assert batch.positions.tolist() == [3, 0, 1]
    assert batch.write_slots.tolist() == [3, 4, 5]
    assert batch.key_slots.tolist() == [0, 1, 2, 3, 4, 4, 5]  # a sees 0-3; b's first token itself; its second both
    assert batch.key_rows.tolist() == [0, 0, 0, 0, 1, 2, 2]
    assert batch.last_rows.tolist() == [0, 2]


def test_make_batch_errors_and_changes_nothing_when_the_pool_is_short():
    cache = PagedKVCache(1, 1, 1, num_blocks=2, tokens_per_block=2)
    cache.add_sequence("a")
    cache.add_sequence("b")
    with pytest.raises(ValueError, match="new_tokens is empty"):
        make_batch(cache, {})
    with pytest.raises(ValueError, match="sequence 'a' has no new tokens"):
        make_batch(cache, {"a": []})
    with pytest.raises(PoolFullError, match=r"this step needs 3 more block\(s\) but the pool has 2 free"):
        make_batch(cache, {"a": [1, 2, 3], "b": [1]})
    assert cache.tables == {"a": [], "b": []} and cache.free_blocks == [0, 1]
    with pytest.raises(ValueError, match="sequence 'c' is not in the cache"):
        make_batch(cache, {"c": [1]})


def test_paged_attention_equals_causal_attention_per_sequence():
    torch.manual_seed(0)
    cache = PagedKVCache(1, 2, 3, num_blocks=12, tokens_per_block=2, dtype=torch.float64)
    lengths = {"a": 5, "b": 1, "c": 4}
    for seq in lengths:
        cache.add_sequence(seq)
    batch = make_batch(cache, {seq: [0] * n for seq, n in lengths.items()})  # three prompts at once
    N = batch.tokens.numel()
    q, k, v = (torch.randn(N, 2, 3, dtype=torch.float64) for _ in range(3))
    cache.k[0].index_copy_(0, batch.write_slots, k)
    cache.v[0].index_copy_(0, batch.write_slots, v)
    out = paged_attention(q, cache.kv[0], batch.key_slots, batch.key_rows, 0.5)
    start = 0
    for n in lengths.values():
        qs, ks, vs = (t[start:start + n].transpose(0, 1) for t in (q, k, v))  # (nh, n, hs)
        expected = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=0.5)
        assert torch.allclose(out[start:start + n], expected.transpose(0, 1), atol=1e-12)
        start += n


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
@pytest.mark.parametrize("seed", [0, *(pytest.param(s, marks=pytest.mark.slow) for s in range(1, 4))])
def test_paged_forward_gives_the_models_logits(seed, dtype, atol):
    """Sequences in a batch, in random chunks (whole prompts, single tokens, pieces), each at its own
    position: every step's logits equal the model's on that sequence's whole context."""
    rng = random.Random(seed)
    model = random_model(seed, dtype)
    cache = PagedKVCache.for_model(model, num_blocks=120, tokens_per_block=rng.choice([1, 3, 4]))
    seqs = {i: [rng.randrange(VOCAB) for _ in range(rng.randint(3, 24))] for i in range(5)}
    done = {i: 0 for i in seqs}
    for i in seqs:
        cache.add_sequence(i)
    with torch.inference_mode():
        while any(done[i] < len(s) for i, s in seqs.items()):
            chunk = {}
            for i, s in seqs.items():
                if done[i] < len(s) and rng.random() < 0.7:
                    chunk[i] = s[done[i]:done[i] + rng.choice([1, 1, 2, 5, 24])]
            if not chunk:
                continue
            logits = paged_forward(model, cache, make_batch(cache, chunk))
            for row, (i, toks) in enumerate(chunk.items()):
                done[i] += len(toks)
                expected = model(torch.tensor([seqs[i][:done[i]]]))[0][0, -1]
                assert torch.allclose(logits[row], expected, atol=atol), (i, done[i])
    cache.check_accounting()


def test_a_slot_nothing_was_written_to_is_never_read():
    """The pool starts as NaN: reading an empty slot, padding or a free block would spread NaN into the tokens."""
    model = random_model(1)
    rng = random.Random(1)
    requests = random_requests(rng, 12, 24, max_arrival=6)
    scheduler = Scheduler(model, num_blocks=20, tokens_per_block=4, max_batch_size=5)
    scheduler.cache.k.fill_(float("nan"))
    scheduler.cache.v.fill_(float("nan"))
    scheduler.submit(requests)
    results = scheduler.run()
    assert all(results[r.request_id].tokens == alone(model, r) for r in requests)


# ------------------------------------------------------------------------------ the scheduler
@pytest.mark.parametrize("seed", [*range(8), *(pytest.param(s, marks=pytest.mark.slow) for s in range(8, 40))])
def test_greedy_outputs_equal_generate_on_random_request_mixes(seed):
    """Random prompts, lengths, arrivals, pool sizes, block sizes, batch caps and policies (float64, so no
    rounding flips an argmax): every request gets exactly its tokens from generate, the pool's accounting
    holds after every step, and at the end every block is free."""
    rng = random.Random(seed)
    block_size = rng.choice([8, 16, 24])
    model = random_model(seed % 5, block_size=block_size, n_layer=rng.choice([1, 2]))
    requests = random_requests(rng, rng.randint(1, 12), block_size, max_arrival=rng.choice([0, 5, 30]))
    tpb = rng.choice([1, 2, 4, 16])
    smallest = max(blocks_for(positions_needed(len(r.prompt), r.max_new_tokens), tpb) for r in requests)
    scheduler = Scheduler(model, num_blocks=smallest + rng.randint(0, 10), tokens_per_block=tpb,
                          max_batch_size=rng.choice([None, 1, 3]), policy=rng.choice(["continuous", "static"]))
    scheduler.submit(requests)
    while not scheduler.done:
        record = scheduler.step()
        scheduler.cache.check_accounting()
        assert record.free_blocks == scheduler.cache.num_free_blocks
        assert record.positions_held - record.positions_used <= (tpb - 1) * len(scheduler.running)
        if scheduler.max_batch_size is not None:
            assert len(record.running) <= scheduler.max_batch_size
    assert sorted(scheduler.cache.free_blocks) == list(range(scheduler.cache.num_blocks))
    results = scheduler.finished
    assert sorted(results) == sorted(r.request_id for r in requests)
    for r in requests:
        assert results[r.request_id].tokens == alone(model, r), r


@pytest.mark.parametrize("seed", [0, *(pytest.param(s, marks=pytest.mark.slow) for s in range(1, 3))])
def test_float32_outputs_equal_generate(seed):
    model = random_model(seed, torch.float32)
    requests = random_requests(random.Random(100 + seed), 10, 24, max_arrival=8)
    results, _ = serve(model, requests, num_blocks=30, tokens_per_block=4, max_batch_size=6)
    for r in requests:
        assert results[r.request_id].tokens == alone(model, r)


def test_a_small_pool_makes_requests_wait_first_come_first_served():
    """Room for one request at a time: they run one after another in arrival order, none overtakes."""
    model = random_model(2)
    big = Request("big", [1] * 10, 7)  # 16 positions: 4 blocks of 4
    small = Request("small", [2], 2)  # 2 positions: 1 block, but it arrived after big
    first = Request("first", [3] * 5, 12)  # 16 positions
    scheduler = Scheduler(model, num_blocks=4, tokens_per_block=4)
    scheduler.submit([first, big, small])
    results = scheduler.run()
    assert [(f.request.request_id, f.admitted_step, f.finished_step) for f in results.values()] == [
        ("first", 0, 11), ("big", 12, 18), ("small", 19, 20)]
    assert [f.steps for f in results.values()] == [12, 19, 21]
    assert [f.waited_steps for f in results.values()] == [0, 12, 19]
    assert max(len(h.running) for h in scheduler.history) == 1
    assert all(results[r.request_id].tokens == alone(model, r) for r in (first, big, small))


def test_admission_counts_the_blocks_running_sequences_will_still_take():
    """Two requests that each fit the free blocks now, but not together by their ends: the second waits."""
    model = random_model(3)
    a = Request("a", [1], 8)  # 8 positions at its end: 2 blocks, but only 1 at the start
    b = Request("b", [2], 8)
    scheduler = Scheduler(model, num_blocks=3, tokens_per_block=4)
    scheduler.submit([a, b])
    first = scheduler.step()
    assert first.admitted == ["a"] and first.free_blocks == 2  # b would fit today, not at step 4
    results = scheduler.run()
    assert results["b"].admitted_step == results["a"].finished_step + 1


def test_static_batching_admits_only_when_the_batch_is_done_and_continuous_is_faster():
    model = random_model(4)
    lengths = [(4, 20), (4, 3), (4, 3), (4, 3), (4, 15), (4, 3), (4, 3), (4, 3)]
    requests = [Request(i, [i + 1] * p, n) for i, (p, n) in enumerate(lengths)]
    runs = {}
    for policy in ("static", "continuous"):
        results, scheduler = serve(model, requests, num_blocks=64, tokens_per_block=4, max_batch_size=4,
                                   policy=policy)
        runs[policy] = (results, scheduler)
        assert all(results[r.request_id].tokens == alone(model, r) for r in requests)
    static, continuous = runs["static"][1], runs["continuous"][1]
    for record in static.history:
        if record.admitted:  # a static batch starts only when the one before it has left
            assert record.step == 0 or static.history[record.step - 1].running == static.history[record.step - 1].finished
    assert [h.admitted for h in static.history if h.admitted] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert static.step_number == 20 + 15 and continuous.step_number == 20
    mean = {p: sum(f.steps for f in runs[p][0].values()) / len(requests) for p in runs}
    assert mean["continuous"] < mean["static"]
    assert mean == {"static": (20 + 3 * 3 + (20 + 15) + 3 * (20 + 3)) / 8, "continuous": (20 + 3 * 3 + 18 + 2 * 6 + 9) / 8}


def test_arrivals_idle_steps_and_seconds():
    model = random_model(5)
    ticks = iter(range(1000))
    scheduler = Scheduler(model, num_blocks=8, tokens_per_block=4, clock=lambda: float(next(ticks)))
    scheduler.submit([Request("a", [1, 2], 2, arrival=0), Request("b", [3], 3, arrival=10)])
    results = scheduler.run()
    assert (results["a"].admitted_step, results["a"].finished_step) == (0, 1)
    assert (results["b"].admitted_step, results["b"].finished_step) == (10, 12)  # the idle steps 2-9 were skipped
    assert [h.step for h in scheduler.history] == [0, 1, 10, 11, 12]
    assert results["b"].steps == 3 and results["b"].seconds > 0
    assert all(f.finished_time > f.arrival_time >= 0 for f in results.values())


def test_scheduler_restores_the_models_mode_and_the_thread_count():
    model = random_model(6).train()
    threads = torch.get_num_threads()
    results, _ = serve(model, [Request(0, [1, 2, 3], 4)], num_blocks=4, tokens_per_block=4)
    assert model.training and torch.get_num_threads() == threads
    assert results[0].tokens == alone(model, Request(0, [1, 2, 3], 4))


def test_record_keeps_a_snapshot_of_every_step():
    model = random_model(7)
    scheduler = Scheduler(model, num_blocks=6, tokens_per_block=2, record=True)
    scheduler.submit([Request("a", [1, 2, 3], 3), Request("b", [4], 2)])
    scheduler.run()
    snaps = [h.snapshot for h in scheduler.history]
    assert [s.lengths for s in snaps] == [{"a": 3, "b": 1}, {"a": 4}, {}]
    assert snaps[0].tables == {"a": (0, 1), "b": (2,)} and snaps[1].tables == {"a": (0, 1)}
    assert [h.rows for h in scheduler.history] == [4, 2, 1]
    assert [h.finished for h in scheduler.history] == [[], ["b"], ["a"]]
    assert Scheduler(model, num_blocks=6).history == []


# ------------------------------------------------------------------------------ errors
@pytest.fixture
def scheduler():
    return Scheduler(random_model(8), num_blocks=3, tokens_per_block=4)  # block_size 24, 12 positions in the pool


@pytest.mark.parametrize("request_, error, message", [
    (Request("p", [1] * 25, 1), ValueError, "its prompt has 25 tokens, longer than the model's block_size=24"),
    (Request("p", [1] * 20, 6), ValueError, r"need 25 positions of context \(prompt \+ max_new_tokens - 1\), more "
                                            "than block_size=24.*at most 5 new tokens"),
    (Request("p", [1] * 10, 5), ValueError, r"needs 14 positions \(4 blocks of 4\), but the whole pool has "
                                            "num_blocks=3: it could never run"),
    (Request("p", [1, 23], 1), ValueError, r"prompt holds token id 23, out of range: ids must be in \[0, vocab_size=23\)"),
])
def test_submit_refuses_requests_that_cannot_run(scheduler, request_, error, message):
    with pytest.raises(error, match=message):
        scheduler.submit(request_)
    assert scheduler.done and not scheduler.pending


@pytest.mark.parametrize("request_, message", [
    (Request("p", [1] * 25, 1), "请求 'p'：提示词有 25 个词元，超过了模型的 block_size=24；请只保留最后 24 个词元"),
    (Request("p", [1] * 20, 6), r"需要 25 个上下文位置（提示词 \+ max_new_tokens - 1），超过了 block_size=24.*最多只能请求 5 个新词元"),
    (Request("p", [1] * 10, 5), r"需要 14 个位置（4 个块，每块 4 个位置），而整个池只有 num_blocks=3 个块"),
    (Request("p", [1, 23], 1), r"提示词中含有词元 id 23，超出范围：id 必须在 \[0, vocab_size=23\) 之内"),
    ([Request("x", [1], 1), Request("x", [2], 1)], "request_id='x' 已被另一个请求使用"),
])
def test_submit_explains_a_refusal_in_the_learners_language(scheduler, request_, message):
    """Lesson 15 prints these refusals: the Chinese edition reads them in Chinese."""
    from gpt_lesson.i18n import language

    with language("zh"), pytest.raises(ValueError, match=message):
        scheduler.submit(request_)
    assert scheduler.done and not scheduler.pending


def test_a_request_id_cannot_be_reused(scheduler):
    with pytest.raises(ValueError, match="request_id='x' is already used by another request"):
        scheduler.submit([Request("x", [1], 1), Request("x", [2], 1)])
    assert not scheduler.pending  # nothing of a refused batch is queued
    scheduler.submit(Request("x", [1], 1))
    with pytest.raises(ValueError, match="request_id='x' is already used"):
        scheduler.submit(Request("x", [1], 1))
    scheduler.run()
    with pytest.raises(ValueError, match="request_id='x' is already used"):  # finished ids stay taken
        scheduler.submit(Request("x", [1], 1))


def test_a_request_cannot_arrive_in_the_past(scheduler):
    scheduler.submit(Request("a", [1], 3))
    scheduler.step()
    scheduler.step()
    with pytest.raises(ValueError, match="arrives at step 1, but the scheduler is already at step 2"):
        scheduler.submit(Request("b", [1], 1, arrival=1))
    scheduler.submit(Request("b", [1], 1, arrival=2))


def test_step_with_nothing_to_do(scheduler):
    with pytest.raises(ValueError, match="there is nothing to run"):
        scheduler.step()
    assert scheduler.run() == {}


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(request_id="a", prompt=[], max_new_tokens=1), ValueError, "request 'a' has an empty prompt"),
    (dict(request_id="a", prompt=[1], max_new_tokens=0), ValueError, r"max_new_tokens=0 must be >= 1"),
    (dict(request_id="a", prompt=[1], max_new_tokens=2.0), TypeError, "max_new_tokens=2.0 must be an integer"),
    (dict(request_id="a", prompt=[-1], max_new_tokens=1), ValueError, r"prompt token=-1 must be >= 0 \(a token id\)"),
    (dict(request_id="a", prompt=[1.0], max_new_tokens=1), TypeError, "prompt token=1.0 must be an integer"),
    (dict(request_id="a", prompt="hello", max_new_tokens=1), TypeError, "prompt must be a sequence of token ids"),
    (dict(request_id="a", prompt=torch.ones(2, 2, dtype=torch.long), max_new_tokens=1), TypeError,
     r"prompt must be a 1-D tensor of integer token ids, got dtype torch.int64 and shape \(2, 2\)"),
    (dict(request_id="a", prompt=torch.ones(2), max_new_tokens=1), TypeError, "dtype torch.float32"),
    (dict(request_id=1.5, prompt=[1], max_new_tokens=1), TypeError, "request_id must be a str or int"),
    (dict(request_id=True, prompt=[1], max_new_tokens=1), TypeError, "request_id=True must be a str or an int"),
    (dict(request_id="a", prompt=[1], max_new_tokens=1, arrival=-1), ValueError, r"arrival=-1 must be >= 0"),
])
def test_request_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        Request(**kwargs)


def test_request_takes_a_tensor_or_a_list():
    assert Request(0, torch.tensor([3, 4]), 1).prompt == (3, 4)
    assert Request(0, range(3), 1).prompt == (0, 1, 2)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(num_blocks=0), ValueError, "num_blocks=0 must be a positive integer"),
    (dict(num_blocks=4, tokens_per_block=0), ValueError, "tokens_per_block=0 must be a positive integer"),
    (dict(num_blocks=4, max_batch_size=0), ValueError, "max_batch_size=0 must be a positive integer"),
    (dict(num_blocks=4, policy="dynamic"), ValueError, r"policy='dynamic' is not one of \('continuous', 'static'\)"),
    (dict(num_blocks=4, record=1), TypeError, "record=1 must be True or False"),
    (dict(num_blocks=4, clock=0.0), TypeError, "clock must be a function"),
])
def test_scheduler_argument_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        Scheduler(random_model(), **kwargs)


def test_scheduler_refuses_what_is_not_a_causal_gpt():
    with pytest.raises(TypeError, match="model must be the course's GPT"):
        Scheduler(torch.nn.Linear(2, 2), num_blocks=4)
    with pytest.raises(TypeError, match="model must be a Module"):
        Scheduler("gpt", num_blocks=4)
    with pytest.raises(ValueError, match="the model has causal=False"):
        Scheduler(random_model(causal=False), num_blocks=4)
    with pytest.raises(TypeError, match="request must be a Request"):
        Scheduler(random_model(), num_blocks=4).submit(["not a request"])


def test_attn_scale_of_the_model_is_used():
    model = random_model(9, attn_scale=1.0)
    r = Request(0, [1, 5, 7, 2], 10)
    assert serve(model, [r], num_blocks=8, tokens_per_block=4)[0][0].tokens == alone(model, r)


# ------------------------------------------------------------------------------ timing
def test_timing_prefill_decode_and_a_decode_step():
    model = random_model(11, torch.float32).train()
    threads = torch.get_num_threads()
    t = time_prefill_and_decode(model, list(range(12)), repeat=2)
    assert t.tokens == 12 and t.prefill_seconds > 0 and t.decode_seconds > 0
    assert t.ratio == t.decode_seconds / t.prefill_seconds
    assert time_decode_step(model, batch_size=3, context=10, steps=2, repeat=2) > 0
    assert model.training and torch.get_num_threads() == threads


@pytest.mark.parametrize("call, error, message", [
    (lambda m: time_prefill_and_decode(m, [1] * 25), ValueError, "the prompt has 25 tokens; it needs 1 to block_size=24"),
    (lambda m: time_prefill_and_decode(m, []), ValueError, "the prompt has 0 tokens"),
    (lambda m: time_prefill_and_decode(m, [23]), ValueError, r"prompt token=23 must be a token id in \[0, vocab_size=23\)"),
    (lambda m: time_prefill_and_decode(m, [1], repeat=0), ValueError, "repeat=0 must be a positive integer"),
    (lambda m: time_decode_step(m, 2, context=22, steps=4), ValueError, "context=22 \\+ steps=4 positions do not fit"),
    (lambda m: time_decode_step(m, 0, context=2), ValueError, "batch_size=0 must be a positive integer"),
])
def test_timing_errors(call, error, message):
    with pytest.raises(error, match=message):
        call(random_model(12))


# ------------------------------------------------------------------------------ pictures
def test_importing_serving_and_its_checks_leaves_the_backend_alone():
    code = ("import sys, matplotlib\n"
            "before = dict.__getitem__(matplotlib.rcParams, 'backend')\n"
            "import gpt_lesson.serving, gpt_lesson.checks\n"
            "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'\n"
            "assert dict.__getitem__(matplotlib.rcParams, 'backend') == before, 'the backend changed'\n"
            "print('ok')\n")
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_plot_block_tables_draws_the_tables_and_the_pool():
    cache = PagedKVCache(1, 1, 1, num_blocks=6, tokens_per_block=4)
    for seq, n in (("A", 5), ("B", 2)):
        cache.add_sequence(seq)
        cache.append(seq, n)
    axes = plot_block_tables(cache, names={"A": "req A"})
    top_texts = [t.get_text() for t in axes[0].texts]
    bottom_texts = [t.get_text() for t in axes[1].texts]
    assert top_texts == ["→0", "→1", "req A (5)", "→2", "B (2)"]
    assert bottom_texts == ["req A.0", "req A.1", "B.0"]
    assert "3 of 6 blocks held, 7 of 12 held positions used, 3 blocks free" in axes[1].get_title()
    plot_block_tables(cache.snapshot())
    with pytest.raises(TypeError, match="cache must be a PagedKVCache or a CacheSnapshot"):
        plot_block_tables({"A": [0]})
    plt.close("all")


def test_plot_timeline_draws_a_bar_per_wait_and_run():
    model = random_model(10)
    results, _ = serve(model, [Request("a", [1], 4), Request("b", [2], 2)], num_blocks=1, tokens_per_block=4)
    ax = plot_timeline(results)
    bars = [(p.get_x(), p.get_width()) for p in ax.patches]
    assert bars == [(0, 4), (0, 4), (4, 2)]  # a runs 0-3; b waits 0-3, runs 4-5
    assert [t.get_text() for t in ax.get_yticklabels()] == ["b", "a"]
    plt.close("all")


# ------------------------------------------------------------------------------ the exercises' checks
from gpt_lesson.checks import check_free_sequence_blocks, check_grow_table, check_locate  # noqa: E402
from gpt_lesson.checks import serving as checks  # noqa: E402  its labels: checks.LOGICAL_BLOCK, ...
from gpt_lesson.checks.verdicts import CALLED_LIBRARY, NOT_ATTEMPTED, RAISED, WRONG_TYPE, WRONG_VALUE  # noqa: E402


def _quiet(check, fn, capsys, **kwargs):
    result = check(fn, **kwargs)
    capsys.readouterr()
    return result


def locate_divmod(table, position, tpb):
    logical, offset = divmod(position, tpb)
    return table[logical], offset


def locate_loop(table, position, tpb):  # walks the blocks, returns a list
    for i, block in enumerate(table):
        if position < (i + 1) * tpb:
            return [block, position - i * tpb]
    raise IndexError("past the table")


def locate_numpy(table, position, tpb):
    import numpy as np
    return np.int64(table[position // tpb]), np.int64(position % tpb)


@pytest.mark.parametrize("fn", [locate_divmod, locate_loop, locate_numpy,
                                lambda t, p, b: (t[p // b], p - (p // b) * b),
                                lambda t, p, b: (torch.tensor(t)[p // b], torch.tensor(p % b))])
def test_check_locate_accepts_right_answers(fn, capsys):
    assert _quiet(check_locate, fn, capsys)
    assert _quiet(check_locate, fn, capsys, hidden=True)


@pytest.mark.parametrize("fn, label, hint", [
    (lambda t, p, b: (p // b, p % b), checks.LOGICAL_BLOCK, "block_table[position // tokens_per_block]"),
    (lambda t, p, b: (p % b, t[p // b]), checks.BLOCK_OFFSET_SWAPPED, "return the physical block first"),
    (lambda t, p, b: (t[p % b], p % b), checks.OFFSET_AS_INDEX, "its index is the logical block"),
    (lambda t, p, b: (t[p // len(t)], p % len(t)), checks.DIVIDED_BY_TABLE_LENGTH, "divmod(position, tokens_per_block)"),
    (lambda t, p, b: t[p // b] * b + p % b, checks.SLOT_NOT_PAIR, "slot number"),
    (lambda t, p, b: (t[(p + 1) // b], p % b), RAISED, "index it with position // tokens_per_block"),
    (lambda t, p, b: (t[p // b], (p + 1) % b), WRONG_VALUE, "expected: (30, 1)"),
    (lambda t, p, b: f"{t[p // b]},{p % b}", WRONG_TYPE, "return a pair (block, offset)"),
    (lambda t, p, b: (float(t[p // b]), p % b), WRONG_TYPE, "return a pair"),
    (lambda t, p, b: locate(t, p, b), CALLED_LIBRARY, "gpt_lesson.serving.locate"),
    (lambda t, p, b: (t.pop(p // b), p % b), checks.INPUTS_CHANGED, "changed block_table in place"),
])
def test_check_locate_names_each_mistake(fn, label, hint, capsys):
    result = check_locate(fn)
    out = capsys.readouterr().out
    assert not result.passed and result.diagnosis == label, out
    assert hint in out


def grow_slices(table, new_length, tpb, free):
    k = max(-(-new_length // tpb) - len(table), 0)
    return table + free[:k], free[k:]


def grow_copy_loop(table, new_length, tpb, free):
    table, free = list(table), list(free)
    while len(table) * tpb < new_length:
        table.append(free.pop(0))
    return table, free


def grow_math(table, new_length, tpb, free):
    import math
    k = math.ceil(new_length / tpb) - len(table)
    return (tuple(table) + tuple(free[:k]), free[k:]) if k > 0 else (table, free)


@pytest.mark.parametrize("fn", [grow_slices, grow_copy_loop, grow_math])
def test_check_grow_table_accepts_right_answers(fn, capsys):
    assert _quiet(check_grow_table, fn, capsys)
    assert _quiet(check_grow_table, fn, capsys, hidden=True)


def _grow_with(blocks):
    def fn(table, new_length, tpb, free):
        k = max(blocks(table, new_length, tpb), 0)
        return table + free[:k], free[k:]
    return fn


def grow_in_place(table, new_length, tpb, free):
    while len(table) * tpb < new_length:
        table.append(free.pop(0))
    return table, free


def grow_pop_end(table, new_length, tpb, free):
    table, free = list(table), list(free)
    while len(table) * tpb < new_length:
        table.append(free.pop())
    return table, free


@pytest.mark.parametrize("fn, label, hint", [
    (_grow_with(lambda t, n, b: n // b - len(t)), checks.PARTIAL_BLOCK_MISSING, "Round up"),
    (_grow_with(lambda t, n, b: n // b + 1 - len(t)), checks.EXTRA_BLOCK_AT_BOUNDARY, "fills its last block exactly"),
    (_grow_with(lambda t, n, b: 1), checks.BLOCK_EVERY_CALL, "len(block_table) * tokens_per_block"),
    (_grow_with(lambda t, n, b: -(-n // b)), checks.BLOCKS_TAKEN_AGAIN, "the table already has some"),
    (lambda t, n, b, f: (t + f[len(f) - 1:], f[:len(f) - 1]) if len(t) * b < n else (t, f),
     checks.TAKEN_FROM_THE_END, "from the front of free_blocks"),
    (grow_pop_end, checks.TAKEN_FROM_THE_END, "free_blocks[:k]"),
    (lambda t, n, b, f: (t + f[:max(-(-n // b) - len(t), 0)], f), checks.NOT_REMOVED_FROM_FREE, "still on the free list"),
    (grow_in_place, checks.INPUTS_CHANGED, "changed block_table in place"),
    (lambda t, n, b, f: t + f[:max(-(-n // b) - len(t), 0)], WRONG_TYPE, "(new_block_table, new_free_blocks)"),
    (lambda t, n, b, f: grow_table(t, n, b, f), CALLED_LIBRARY, "gpt_lesson.serving.grow_table"),
])
def test_check_grow_table_names_each_mistake(fn, label, hint, capsys):
    result = check_grow_table(fn)
    out = capsys.readouterr().out
    assert not result.passed and result.diagnosis == label, out
    assert hint in out


def free_comprehension(tables, free, seq_id):
    return {s: t for s, t in tables.items() if s != seq_id}, free + tables[seq_id]


def free_copy_pop(tables, free, seq_id):
    tables = dict(tables)
    gone = tables.pop(seq_id)
    return tables, [*free, *gone]


@pytest.mark.parametrize("fn", [free_comprehension, free_copy_pop])
def test_check_free_sequence_blocks_accepts_right_answers(fn, capsys):
    assert _quiet(check_free_sequence_blocks, fn, capsys)
    assert _quiet(check_free_sequence_blocks, fn, capsys, hidden=True)


def free_in_place(tables, free, seq_id):
    free.extend(tables.pop(seq_id))
    return tables, free


@pytest.mark.parametrize("fn, label, hint", [
    (lambda t, f, s: (t, f + t[s]), checks.TABLE_KEPT, "free and held at once"),
    (lambda t, f, s: ({k: v for k, v in t.items() if k != s}, f), checks.BLOCKS_NOT_FREED, "a leak"),
    (lambda t, f, s: ({k: v for k, v in t.items() if k != s}, t[s] + f), checks.FREED_TO_THE_FRONT, "not the front"),
    (lambda t, f, s: ({k: v for k, v in t.items() if k != s}, f + t[s] + t[s]), checks.FREED_TWICE, "two sequences"),
    (lambda t, f, s: ({}, f + t[s]), checks.OTHER_TABLES_DROPPED, "drop only seq_id's"),
    (lambda t, f, s: ({k: v for k, v in t.items() if k != s}, f + t[s][-1:]), checks.SOME_BLOCKS_LOST, "all of"),
    (free_in_place, checks.INPUTS_CHANGED, "changed tables in place"),
    (lambda t, f, s: f + t[s], WRONG_TYPE, "(new_tables, new_free_blocks)"),
    (lambda t, f, s: free_sequence_blocks(t, f, s), CALLED_LIBRARY, "gpt_lesson.serving.free_sequence_blocks"),
])
def test_check_free_sequence_blocks_names_each_mistake(fn, label, hint, capsys):
    result = check_free_sequence_blocks(fn)
    out = capsys.readouterr().out
    assert not result.passed and result.diagnosis == label, out
    assert hint in out


@pytest.mark.parametrize("check", [check_locate, check_grow_table, check_free_sequence_blocks])
def test_serving_checks_stub_strict_and_arguments(check, capsys):
    def stub(*args):
        raise NotImplementedError

    result = check(stub)
    assert not result.attempted and result.diagnosis == NOT_ATTEMPTED
    with pytest.raises(AssertionError):
        check(stub, strict=True)
    with pytest.raises(TypeError, match="expects your function"):
        check("not a function")
    with pytest.raises(TypeError, match="strict=1 must be True or False"):
        check(stub, strict=1)
    capsys.readouterr()
