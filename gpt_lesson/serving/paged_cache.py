"""A paged KV cache: one pool of fixed-size blocks per layer, and a block table per sequence.

Lesson 10's :class:`~gpt_lesson.model.KVCache` gives each sequence one contiguous buffer of
``max_len`` positions, reserved before the first token. A server does not know how long an answer
will be, so it must reserve for the longest, and most of that buffer stays empty. vLLM's
PagedAttention (Kwon et al., 2023) stores keys and values the way an operating system stores a
program's memory: in fixed-size **blocks** taken from one shared pool only when a sequence reaches
them, with a per-sequence **block table** that maps the sequence's logical block ``i`` (its
positions ``i * tokens_per_block`` and up) to a physical block of the pool. A sequence then wastes at
most the unfilled end of its last block, and a finished sequence's blocks go straight back to the pool.

The bookkeeping is three small functions on plain Python lists, so a lesson can ask for them:
:func:`locate` (a position to its physical block and offset), :func:`grow_table` (take blocks when a
sequence crosses a block boundary) and :func:`free_sequence_blocks` (give a finished sequence's blocks
back). Each returns new lists and changes none it is given. :class:`PagedKVCache` holds the pool's
tensors and every sequence's table, and is built on exactly those three.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import torch

from .. import validation

__all__ = [
    "PoolFullError", "blocks_for", "locate", "grow_table", "free_sequence_blocks", "PagedKVCache", "CacheSnapshot",
    "bytes_per_position",
]


class PoolFullError(ValueError):
    """The pool has fewer free blocks than a sequence needs (a scheduler's admission rule prevents it)."""


def blocks_for(n_positions: int, tokens_per_block: int) -> int:
    """How many blocks hold ``n_positions`` positions: ``ceil(n_positions / tokens_per_block)``."""
    validation.check_int("n_positions", n_positions, minimum=0)
    validation.check_positive_int("tokens_per_block", tokens_per_block)
    return -(-n_positions // tokens_per_block)


def locate(block_table: Sequence[int], position: int, tokens_per_block: int) -> tuple[int, int]:
    """Where position ``position`` of a sequence is stored: ``(physical block, offset in that block)``.

    Position ``p`` is in the sequence's logical block ``p // tokens_per_block``, at offset
    ``p % tokens_per_block``; the block table says which physical block that logical block is.
    """
    validation.check_int("position", position, minimum=0)
    validation.check_positive_int("tokens_per_block", tokens_per_block)
    logical, offset = divmod(position, tokens_per_block)
    if logical >= len(block_table):
        raise ValueError(
            f"position={position} is in logical block {logical}, but the block table has {len(block_table)} "
            f"block(s) of {tokens_per_block} positions (positions 0..{len(block_table) * tokens_per_block - 1}): "
            "grow the table before writing there"
        )
    return block_table[logical], offset


def grow_table(block_table: Sequence[int], new_length: int, tokens_per_block: int,
               free_blocks: Sequence[int]) -> tuple[list[int], list[int]]:
    """The block table after growing to ``new_length`` positions, and the free list after: ``(table, free)``.

    A new block is needed only when ``new_length`` crosses a block boundary; blocks are taken from the
    front of ``free_blocks``. The lists given are not changed. Raises :class:`PoolFullError` when
    there are not enough free blocks.
    """
    needed = max(blocks_for(new_length, tokens_per_block) - len(block_table), 0)
    if needed > len(free_blocks):
        raise PoolFullError(
            f"new_length={new_length} needs {needed} more block(s) of {tokens_per_block} positions, but the pool "
            f"has {len(free_blocks)} free: wait until a sequence finishes (or make the pool larger)"
        )
    return [*block_table, *free_blocks[:needed]], list(free_blocks[needed:])


def free_sequence_blocks(tables: Mapping[Hashable, Sequence[int]], free_blocks: Sequence[int],
                         seq_id: Hashable) -> tuple[dict[Hashable, list[int]], list[int]]:
    """The tables without finished sequence ``seq_id``, and the free list with its blocks on the end: ``(tables, free)``.

    The dict and list given are not changed.
    """
    if seq_id not in tables:
        raise ValueError(f"sequence {seq_id!r} has no block table (known: {sorted(map(repr, tables))})")
    rest = {s: list(t) for s, t in tables.items() if s != seq_id}
    return rest, [*free_blocks, *tables[seq_id]]


def bytes_per_position(n_layer: int, n_embd: int, element_size: int = 4) -> int:
    """Bytes of keys and values one position takes in every layer: ``2 * n_layer * n_embd * element_size``."""
    for name, value in (("n_layer", n_layer), ("n_embd", n_embd), ("element_size", element_size)):
        validation.check_positive_int(name, value)
    return 2 * n_layer * n_embd * element_size


@dataclass(frozen=True)
class CacheSnapshot:
    """The bookkeeping of a :class:`PagedKVCache` at one moment (no tensors): for figures and explorers."""

    num_blocks: int
    tokens_per_block: int
    tables: dict[Hashable, tuple[int, ...]]
    lengths: dict[Hashable, int]
    free_blocks: tuple[int, ...]

    def owner(self) -> dict[int, Hashable]:
        """Which sequence holds each block that is in use."""
        return {block: seq for seq, table in self.tables.items() for block in table}


class PagedKVCache:
    """Keys and values of many sequences in one pool of blocks, found through each sequence's block table.

    ``kv`` has shape (n_layer, num_blocks * tokens_per_block, 2, n_head, head_size): position ``offset`` of
    physical block ``b`` is *slot* ``b * tokens_per_block + offset``, in every layer, and holds that
    position's key (``kv[:, slot, 0]``, also ``k[:, slot]``) next to its value (``kv[:, slot, 1]``, ``v``),
    so one copy writes both and one gather reads both. The pool is allocated once and not cleared: a slot
    is read only after its position was written.
    A sequence is added with :meth:`add_sequence`, grows with :meth:`append` (which takes blocks only
    when it crosses a block boundary) and gives its blocks back with :meth:`free_sequence`.
    Blocks are taken from the front of the free list and given back onto its end.
    """

    def __init__(
        self,
        n_layer: int,
        n_head: int,
        head_size: int,
        num_blocks: int,
        tokens_per_block: int = 16,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        for name, value in (("n_layer", n_layer), ("n_head", n_head), ("head_size", head_size),
                            ("num_blocks", num_blocks), ("tokens_per_block", tokens_per_block)):
            validation.check_positive_int(name, value)
        self.kv = torch.empty((n_layer, num_blocks * tokens_per_block, 2, n_head, head_size), dtype=dtype,
                              device=device)
        self.num_blocks, self.tokens_per_block = num_blocks, tokens_per_block
        self.free_blocks: list[int] = list(range(num_blocks))
        self.tables: dict[Hashable, list[int]] = {}
        self.lengths: dict[Hashable, int] = {}
        # Each sequence's block table expanded to slots (block b holds slots b * tpb .. b * tpb + tpb - 1),
        # extended whenever the table grows, so a step does not recompute every position's slot.
        self._slots: dict[Hashable, list[int]] = {}

    @classmethod
    def for_model(cls, model: torch.nn.Module, num_blocks: int, tokens_per_block: int = 16) -> PagedKVCache:
        """An empty pool for ``model``'s layers, heads and dtype."""
        cfg = model.config
        p = next(model.parameters())
        n_head = model.blocks[0].sa.n_head
        return cls(len(model.blocks), n_head, cfg.n_embd // n_head, num_blocks, tokens_per_block, p.dtype, p.device)

    # ---------------------------------------------------------------- sequences
    def add_sequence(self, seq_id: Hashable) -> None:
        """Start an empty sequence (no block yet)."""
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id!r} is already in the cache; every sequence needs its own id")
        self.tables[seq_id], self.lengths[seq_id], self._slots[seq_id] = [], 0, []

    def _table(self, seq_id: Hashable) -> list[int]:
        if seq_id not in self.tables:
            raise ValueError(f"sequence {seq_id!r} is not in the cache (known: {sorted(map(repr, self.tables))})")
        return self.tables[seq_id]

    def append(self, seq_id: Hashable, n: int) -> list[int]:
        """Make room for ``n`` more positions of ``seq_id``; return the slots they are written to."""
        validation.check_int("n", n, minimum=0)
        table, start, tpb = self._table(seq_id), self.lengths[seq_id], self.tokens_per_block
        if start + n > len(table) * tpb:  # the last block is full: take more
            self.tables[seq_id], self.free_blocks = grow_table(table, start + n, tpb, self.free_blocks)
            for block in self.tables[seq_id][len(table):]:
                self._slots[seq_id].extend(range(block * tpb, block * tpb + tpb))
        self.lengths[seq_id] = start + n
        return self._slots[seq_id][start:start + n]

    def free_sequence(self, seq_id: Hashable) -> list[int]:
        """Remove ``seq_id`` and give its blocks back onto the end of the free list; return them."""
        given = self._table(seq_id)
        self.tables, self.free_blocks = free_sequence_blocks(self.tables, self.free_blocks, seq_id)
        del self.lengths[seq_id], self._slots[seq_id]
        return given

    def slots(self, seq_id: Hashable, start: int = 0, stop: int | None = None) -> list[int]:
        """The slots of positions ``start..stop-1`` of ``seq_id`` (default: all it holds), through its block table."""
        length = self.length(seq_id)
        stop = length if stop is None else stop
        if not 0 <= start <= stop <= length:
            raise ValueError(f"positions {start}..{stop - 1} are not all held by sequence {seq_id!r} "
                             f"(it holds {length} positions)")
        return self._slots[seq_id][start:stop]

    def length(self, seq_id: Hashable) -> int:
        """Positions of ``seq_id`` held in the cache."""
        self._table(seq_id)
        return self.lengths[seq_id]

    @property
    def k(self) -> torch.Tensor:
        """Every key of the pool, (n_layer, slots, n_head, head_size): a view of ``kv``."""
        return self.kv[:, :, 0]

    @property
    def v(self) -> torch.Tensor:
        """Every value of the pool, (n_layer, slots, n_head, head_size): a view of ``kv``."""
        return self.kv[:, :, 1]

    # ---------------------------------------------------------------- accounting
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    @property
    def bytes_per_block(self) -> int:
        """Bytes of one block in every layer, keys and values."""
        n_layer, _, _, n_head, head_size = self.kv.shape
        return 2 * n_layer * self.tokens_per_block * n_head * head_size * self.kv.element_size()

    @property
    def nbytes(self) -> int:
        """Memory of the whole pool, in bytes."""
        return self.num_blocks * self.bytes_per_block

    def positions_used(self) -> int:
        """Positions holding a key and value, over all sequences."""
        return sum(self.lengths.values())

    def positions_held(self) -> int:
        """Positions in the blocks the sequences hold (used, or free at the end of a last block)."""
        return self.tokens_per_block * sum(len(t) for t in self.tables.values())

    def check_accounting(self) -> None:
        """Raise ValueError unless every block is free or held by exactly one sequence, each table as long as needed."""
        seen: dict[int, Hashable] = {}
        tpb = self.tokens_per_block
        for seq_id, table in self.tables.items():
            want = blocks_for(self.lengths[seq_id], tpb)
            if len(table) != want:
                raise ValueError(f"sequence {seq_id!r} holds {self.lengths[seq_id]} positions in {len(table)} "
                                 f"block(s); it needs exactly {want}")
            for block in table:
                if block in seen:
                    raise ValueError(f"block {block} is in the tables of both {seen[block]!r} and {seq_id!r}")
                seen[block] = seq_id
        free = self.free_blocks
        outside = sorted(b for b in [*free, *seen] if not 0 <= b < self.num_blocks)
        if outside:
            raise ValueError(f"block {outside[0]} is not a block of this pool (0..{self.num_blocks - 1})")
        if len(set(free)) != len(free):
            raise ValueError(f"a block is on the free list twice: {sorted(free)}")
        shared = set(free) & set(seen)
        if shared:
            block = min(shared)
            raise ValueError(f"block {block} is both free and held by {seen[block]!r}")
        missing = set(range(self.num_blocks)) - set(free) - set(seen)
        if missing or len(free) + len(seen) != self.num_blocks:
            raise ValueError(f"blocks {sorted(missing)} are neither free nor held: they leaked")
        for seq_id, table in self.tables.items():
            slots = [block * tpb + offset for block, offset in (locate(table, p, tpb) for p in range(len(table) * tpb))]
            if self._slots.get(seq_id) != slots:
                raise ValueError(f"the slots of sequence {seq_id!r} no longer follow its block table {table}")

    def snapshot(self) -> CacheSnapshot:
        return CacheSnapshot(self.num_blocks, self.tokens_per_block,
                             {s: tuple(t) for s, t in self.tables.items()}, dict(self.lengths),
                             tuple(self.free_blocks))
