"""A replay of PyTorch's CUDA caching allocator: allocated, reserved and nvidia-smi bytes apart.

Pure Python (no torch): :class:`CachingAllocator` takes ``malloc(handle, size, stream)``,
``free(handle)`` and ``empty_cache()`` events in program order and applies the rules of
``DeviceCachingAllocator`` in PyTorch's ``c10/cuda/CUDACachingAllocator.cpp``; its statistics
mirror ``torch.cuda.memory_stats()``: ``allocated_bytes`` (block sizes after rounding, what
``max_memory_allocated`` reports), ``reserved_bytes`` (segments obtained from cudaMalloc or
mapped pages of expandable segments: ``max_memory_reserved``), ``active_bytes``,
``requested_bytes``, ``segment``, ``num_alloc_retries``, ``num_ooms``. The nvidia-smi figure is
the reserved bytes plus memory outside the allocator (:func:`nvidia_smi_bytes`).
:meth:`CachingAllocator.irreducible_bytes` and :func:`measure_floor` measure the part of the
reserve no release gives back (fmest issue 22); :func:`irreducible_reserve_bytes` is the rule
derived from them, the floor of the analytic reserve's cap at the device.

Sources (every rule below names its function):

* ``ALLOC`` = pytorch/pytorch ``c10/cuda/CUDACachingAllocator.cpp`` at commit
  eb42ad6eca0ce61e7c581212b4bf32f991425571 (``DeviceCachingAllocator``);
* ``CONFIG`` = pytorch/pytorch ``c10/core/AllocatorConfig.cpp`` at commit
  065861fba7598880aa3216822742a1172d0a197c (``AllocatorConfig::parseArgs``, defaults,
  ``roundup_power2_divisions`` intervals, ``max_non_split_rounding_mb``).

What is not simulated (docs/allocator.md): CUDA events and ``record_stream`` (a block freed
while another stream uses it is reusable at once here), CUDA-graph private pools,
``garbage_collection_threshold`` (active only under ``set_per_process_memory_fraction``; parsed,
not applied), the cudaMallocAsync backend, and memory freed by other processes. When even the
retry after freeing every cached block fails (an OOM in torch), the replay records it
(``oom``/``num_ooms``) and goes on with a segment over the capacity, so the peaks still say how
much the program asked for.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left, insort
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional, Sequence

from fmest.errors import InputError
from fmest.physics.device_terms import (  # noqa: F401  (re-exported: the floor rule)
    ALLOCATOR_FLOOR_CONSTANT_BYTES,
    ALLOCATOR_FLOOR_EXPANDABLE_CONSTANT_BYTES,
    ALLOCATOR_FLOOR_EXPANDABLE_FRACTION,
    ALLOCATOR_FLOOR_FRACTION,
    ALLOCATOR_RESERVE_MIN_TRACED_BYTES,
    irreducible_reserve_bytes,
)

KIB = 1 << 10
MIB = 1 << 20
# ALLOC, top of the file: the size classes.
K_MIN_BLOCK_SIZE = 512  # "all sizes are rounded to at least 512 bytes"
K_SMALL_SIZE = 1 * MIB  # "largest 'small' allocation is 1 MiB"
K_SMALL_BUFFER = 2 * MIB  # "'small' allocations are packed in 2 MiB blocks"
K_MIN_LARGE_ALLOC = 10 * MIB  # "allocations between 1 and 10 MiB may use kLargeBuffer"
K_LARGE_BUFFER = 20 * MIB  # "'large' allocations may be packed in 20 MiB blocks"
K_ROUND_LARGE = 2 * MIB  # "round up large allocations to 2 MiB"
#: CONFIG: roundup_power2_divisions holds one value per power-of-two interval from 1 MiB
#: (kRoundUpPowerOfTwoStart) to 64 GiB (kRoundUpPowerOfTwoEnd): 16 intervals.
K_ROUNDUP_INTERVALS = 16

#: The keys ``AllocatorConfig::parseArgs`` (CONFIG) accepts.
ACCEPTED_OPTIONS = ("backend", "expandable_segments", "garbage_collection_threshold",
                    "max_non_split_rounding_mb", "max_split_size_mb", "per_process_memory_fraction",
                    "pinned_num_register_threads", "pinned_use_background_threads",
                    "pinned_use_cuda_host_register", "release_lock_on_cudamalloc",
                    "roundup_power2_divisions")


@dataclass(frozen=True)
class AllocatorConfig:
    """The allocator settings that change where blocks go (``PYTORCH_CUDA_ALLOC_CONF``).

    Defaults are CONFIG's ``AllocatorConfig`` constructor: no max split size (SIZE_MAX),
    ``max_non_split_rounding`` = kLargeBuffer, no power-of-two rounding, no expandable
    segments."""

    expandable_segments: bool = False
    #: None = SIZE_MAX (the default: every block may be split)
    max_split_size: Optional[int] = None
    max_non_split_rounding: int = K_LARGE_BUFFER
    #: divisions per power-of-two interval [1 MiB, 2 MiB), ... (16 entries; 0 = off)
    roundup_power2_divisions: tuple[int, ...] = (0,) * K_ROUNDUP_INTERVALS
    garbage_collection_threshold: float = 0.0
    #: page size of large-pool expandable segments (ALLOC find_expandable_block: kLargeBuffer)
    large_segment_size: int = K_LARGE_BUFFER

    @property
    def mss(self) -> float:
        return float("inf") if self.max_split_size is None else self.max_split_size

    @classmethod
    def parse(cls, text: Optional[str]) -> AllocatorConfig:
        """Parse a ``PYTORCH_CUDA_ALLOC_CONF`` string (``"expandable_segments:True,
        max_split_size_mb:128"``). Raises :class:`~fmest.errors.InputError` naming the option
        for an unknown key or a bad value."""
        return parse_alloc_conf(text)


def _lex(text: str) -> list[str]:
    """CONFIG ``AllocatorConfig::lexArgs``: tokens split at ``, : [ ]``, spaces dropped."""
    out: list[str] = []
    buf: list[str] = []
    for ch in text:
        if ch in ",:[]":
            if buf:
                out.append("".join(buf))
                buf = []
            out.append(ch)
        elif ch != " ":
            buf.append(ch)
    if buf:
        out.append("".join(buf))
    return out


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def parse_alloc_conf(text: Optional[str]) -> AllocatorConfig:
    """:meth:`AllocatorConfig.parse` (CONFIG ``AllocatorConfig::parseArgs`` and its
    ``parse*`` helpers: the same keys, bounds and ``[size_mb:divisions,...,>:divisions]``
    syntax)."""
    if not text:
        return AllocatorConfig()
    field_name = "PYTORCH_CUDA_ALLOC_CONF"
    tok = _lex(text)
    kw: dict[str, object] = {}
    i = 0

    def expect(j: int, ch: str, key: str) -> None:
        if j >= len(tok) or tok[j] != ch:
            raise InputError(f"{field_name}.{key}", f"expected {ch!r}", value=text)

    def value(j: int, key: str) -> str:
        if j >= len(tok) or tok[j] in ",:[]":
            raise InputError(f"{field_name}.{key}", "expected a value", value=text)
        return tok[j]

    def number(s: str, key: str, kind: type = int) -> float:
        try:
            return kind(s)
        except ValueError:
            raise InputError(f"{field_name}.{key}", f"not a{'n integer' if kind is int else ' number'}",
                             value=s) from None

    while i < len(tok):
        key = tok[i]
        if key not in ACCEPTED_OPTIONS:
            raise InputError(field_name, f"unrecognized caching-allocator option {key!r}",
                             value=text, accepted=ACCEPTED_OPTIONS)
        expect(i + 1, ":", key)
        i += 2
        if key == "roundup_power2_divisions" and i < len(tok) and tok[i] == "[":
            divs = [0] * K_ROUNDUP_INTERVALS
            first, last = True, 0
            i += 1
            while i < len(tok) and tok[i] != "]":
                left = value(i, key)
                expect(i + 1, ":", key)
                d = int(number(value(i + 2, key), key))
                if d != 0 and not _is_pow2(d):
                    raise InputError(f"{field_name}.{key}", "divisions must be a power of 2 "
                                     "or 0", value=d)
                if left == ">":
                    for k in range(last, K_ROUNDUP_INTERVALS):
                        divs[k] = d
                else:
                    mb = int(number(left, key))
                    if not _is_pow2(mb):
                        raise InputError(f"{field_name}.{key}", "intervals must be powers of 2 "
                                         "(MiB)", value=mb)
                    idx = min(mb.bit_length() - 1, K_ROUNDUP_INTERVALS - 1)
                    if first:
                        for k in range(idx):
                            divs[k] = d
                        first = False
                    divs[idx] = d
                    last = idx
                i += 3
                if i < len(tok) and tok[i] == ",":
                    i += 1
            expect(i, "]", key)
            i += 1
            kw[key] = tuple(divs)
        else:
            raw = value(i, key)
            if key == "max_split_size_mb" or key == "max_non_split_rounding_mb":
                mb = int(number(raw, key))
                if mb < K_LARGE_BUFFER // MIB:  # CONFIG parseMaxSplitSize: >= kLargeBuffer/kMB
                    raise InputError(f"{field_name}.{key}", f"too small, must be >= "
                                     f"{K_LARGE_BUFFER // MIB}", value=mb)
                kw["max_split_size" if key == "max_split_size_mb"
                   else "max_non_split_rounding"] = mb * MIB
            elif key == "roundup_power2_divisions":
                d = int(number(raw, key))
                if not _is_pow2(d):
                    raise InputError(f"{field_name}.{key}", "divisions must be a power of 2",
                                     value=d)
                kw[key] = (d,) * K_ROUNDUP_INTERVALS
            elif key == "garbage_collection_threshold":
                g = float(number(raw, key, float))
                if not 0.0 < g < 1.0:
                    raise InputError(f"{field_name}.{key}", "must be in (0.0, 1.0)", value=g)
                kw[key] = g
            elif key in ("expandable_segments", "release_lock_on_cudamalloc",
                         "pinned_use_cuda_host_register", "pinned_use_background_threads"):
                if raw not in ("True", "False"):
                    raise InputError(f"{field_name}.{key}", "expected True or False", value=raw)
                if key == "expandable_segments":
                    kw[key] = raw == "True"
            elif key == "backend":
                if raw == "cudaMallocAsync":
                    raise InputError(f"{field_name}.backend", "the cudaMallocAsync backend is "
                                     "not simulated (only the native caching allocator)",
                                     value=raw, accepted=("native",))
                if raw != "native":
                    raise InputError(f"{field_name}.backend", "unknown allocator backend",
                                     value=raw, accepted=("native", "cudaMallocAsync"))
            else:  # pinned_num_register_threads, per_process_memory_fraction: host/limit only
                number(raw, key, float)
            i += 1
        if i < len(tok):
            expect(i, ",", key)
            i += 1
    return AllocatorConfig(**kw)  # type: ignore[arg-type]


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """ALLOC ``roundup_power2_next_division``: ``size`` rounded up to the next of
    ``divisions`` equal steps between the powers of two around it (1200, 4 -> 1280)."""
    if size <= 4 or divisions <= 1:
        return size
    if _is_pow2(size):
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


def round_size(size: int, cfg: AllocatorConfig = AllocatorConfig()) -> int:
    """ALLOC ``round_size``: at least kMinBlockSize, then multiples of 512 bytes, or the
    power-of-two division when ``roundup_power2_divisions`` applies to the size's interval
    (CONFIG ``AllocatorConfig::roundup_power2_divisions(size)``: interval index
    log2(size) - 20, clamped to [0, 15])."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    idx = min(max(size.bit_length() - 1 - 20, 0), K_ROUNDUP_INTERVALS - 1)
    divisions = cfg.roundup_power2_divisions[idx]
    if divisions > 0 and size > K_MIN_BLOCK_SIZE * divisions:
        return roundup_power2_next_division(size, divisions)
    return K_MIN_BLOCK_SIZE * ((size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def allocation_size(size: int) -> int:
    """ALLOC ``get_allocation_size``: the segment cudaMalloc'ed for a (rounded) request that
    no cached block fits: 2 MiB for small requests (<= 1 MiB), 20 MiB for 1-10 MiB, else the
    request rounded up to 2 MiB."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


class _Block:
    """ALLOC ``struct Block``: a piece of a segment, linked to its neighbours (prev/next)."""

    __slots__ = ("addr", "size", "stream", "small", "allocated", "prev", "next", "mapped",
                 "seg", "requested")

    def __init__(self, addr: int, size: int, stream: int, small: bool,
                 seg: Optional[_Expandable] = None, mapped: bool = True) -> None:
        self.addr = addr
        self.size = size
        self.stream = stream
        self.small = small
        self.allocated = False
        self.prev: Optional[_Block] = None
        self.next: Optional[_Block] = None
        self.mapped = mapped
        self.seg = seg  # the expandable segment, None for a cudaMalloc'ed one
        self.requested = 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


class _Expandable:
    """ALLOC ``struct ExpandableSegment``: reserved address space mapped page by page."""

    __slots__ = ("base", "page")

    def __init__(self, base: int, page: int) -> None:
        self.base = base
        self.page = page


class _Pool:
    """ALLOC ``struct BlockPool`` for one stream: free mapped blocks sorted by (size, address)
    (``BlockComparatorSize``) and unmapped ranges of expandable segments sorted by address
    (``BlockComparatorAddress``)."""

    __slots__ = ("blocks", "unmapped")

    def __init__(self) -> None:
        self.blocks: list[tuple[int, int]] = []
        self.unmapped: list[int] = []


@dataclass
class Stat:
    """ALLOC ``increase_stat``/``decrease_stat``: current and peak."""

    current: int = 0
    peak: int = 0

    def add(self, n: int) -> None:
        self.current += n
        if self.current > self.peak:
            self.peak = self.current


@dataclass
class AllocatorStats:
    """The ``torch.cuda.memory_stats()`` counters the replay keeps (aggregate pool)."""

    allocated_bytes: Stat = field(default_factory=Stat)
    reserved_bytes: Stat = field(default_factory=Stat)
    active_bytes: Stat = field(default_factory=Stat)
    requested_bytes: Stat = field(default_factory=Stat)
    segment: Stat = field(default_factory=Stat)
    num_alloc_retries: int = 0
    num_ooms: int = 0
    num_device_alloc: int = 0
    num_device_free: int = 0


class CachingAllocator:
    """One device's ``DeviceCachingAllocator`` (ALLOC). ``capacity``: the bytes cudaMalloc can
    hand out in all (device memory less what is outside the allocator); None = unlimited."""

    def __init__(self, config: AllocatorConfig | str | None = None, *,
                 capacity: Optional[int] = None) -> None:
        self.config = (config if isinstance(config, AllocatorConfig)
                       else AllocatorConfig.parse(config))
        self.capacity = capacity
        self.stats = AllocatorStats()
        self.oom = False
        self._pools: dict[tuple[bool, int], _Pool] = {}
        self._by_addr: dict[int, _Block] = {}  # every block, by its start address
        self._handles: dict[object, _Block] = {}
        self._next_addr = 1 << 20  # distinct address ranges for distinct segments

    # -- public API ---------------------------------------------------------------------------
    def malloc(self, handle: object, size: int, stream: int = 0) -> None:
        """ALLOC ``malloc``: round, search the pool, else allocate a segment (retrying after
        freeing oversize cached blocks, then after freeing every cached block)."""
        if size <= 0:  # NativeCachingAllocator::allocate: size 0 never reaches malloc
            return
        cfg = self.config
        rsize = round_size(size, cfg)
        small = rsize <= K_SMALL_SIZE  # ALLOC get_pool
        alloc_size = allocation_size(rsize)
        block = self._get_free_block(small, stream, rsize)
        if block is None:
            block = self._alloc_block(small, stream, rsize, alloc_size, retry=False)
            if block is None and self._release_available_cached_blocks(small, stream, rsize):
                block = self._alloc_block(small, stream, rsize, alloc_size, retry=False)
            if block is None:
                self._release_cached_blocks()
                block = self._alloc_block(small, stream, rsize, alloc_size, retry=True)
            if block is None:  # torch raises OutOfMemoryError here; the replay goes on
                self.oom = True
                self.stats.num_ooms += 1
                block = self._alloc_block(small, stream, rsize, alloc_size, retry=False,
                                          force=True)
                assert block is not None
        split = self._should_split(block, rsize)
        self._handles[handle] = self._alloc_found_block(block, rsize, size, split)

    def free(self, handle: object) -> None:
        """ALLOC ``free`` + ``free_block``: the block returns to its pool, merged with free
        neighbours of the same segment (``try_merge_blocks``)."""
        block = self._handles.pop(handle, None)
        if block is None:
            return
        st = self.stats
        block.allocated = False
        st.allocated_bytes.add(-block.size)
        original = block.size
        for cand in (block.prev, block.next):
            self._try_merge(block, cand)
        self._insert(block)
        st.active_bytes.add(-original)
        st.requested_bytes.add(-block.requested)

    def empty_cache(self) -> None:
        """ALLOC ``emptyCache`` -> ``release_cached_blocks``: every cached segment with no
        block in use goes back to CUDA; expandable segments unmap their free whole pages."""
        self._release_cached_blocks()

    def replay(self, events: Iterable[Sequence[object]]) -> AllocatorStats:
        """Apply ``events``: ``("m", handle, size[, stream])``, ``("f", handle)``,
        ``("e",)`` (empty_cache)."""
        malloc, free = self.malloc, self.free
        for ev in events:
            op = ev[0]
            if op == "m":
                malloc(ev[1], int(ev[2]), int(ev[3]) if len(ev) > 3 else 0)  # type: ignore
            elif op == "f":
                free(ev[1])
            elif op == "e":
                self.empty_cache()
            else:
                raise ValueError(f"unknown allocator event {ev!r}")
        return self.stats

    def live_handles(self) -> int:
        return len(self._handles)

    def releasable_bytes(self) -> int:
        """Bytes ``release_cached_blocks`` (ALLOC, the last step before an OOM) would give back
        now: every cached block that is a whole cudaMalloc'ed segment (no prev/next: a segment
        holding one live block keeps its free remainder), and the whole pages inside each free
        mapped block of an expandable segment (``unmap_block``; partial pages stay mapped)."""
        out = 0
        for pool in self._pools.values():
            for _size, addr in pool.blocks:
                b = self._by_addr[addr]
                if b.seg is None:
                    if not b.is_split():
                        out += b.size
                    continue
                page = b.seg.page
                begin = -(-(b.addr - b.seg.base) // page)
                end = (b.addr + b.size - b.seg.base) // page
                if end > begin:
                    out += (end - begin) * page
        return out

    def irreducible_bytes(self) -> int:
        """Reserved bytes the allocator cannot give back now (``reserved - releasable``): the
        segments (or, with expandable segments, the 2/20 MiB pages) that hold at least one live
        block. Its excess over ``requested_bytes`` is the internal fragmentation of those
        segments plus the rounding of each live block (``round_size``, unsplit remainders)."""
        return self.stats.reserved_bytes.current - self.releasable_bytes()

    # -- pools --------------------------------------------------------------------------------
    def _pool(self, small: bool, stream: int) -> _Pool:
        key = (small, stream)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = _Pool()
        return pool

    def _insert(self, b: _Block) -> None:
        pool = self._pool(b.small, b.stream)
        if b.mapped:
            insort(pool.blocks, (b.size, b.addr))
        else:
            insort(pool.unmapped, b.addr)

    def _remove(self, b: _Block) -> None:
        pool = self._pool(b.small, b.stream)
        if b.mapped:
            lst: list = pool.blocks
            key: object = (b.size, b.addr)
        else:
            lst, key = pool.unmapped, b.addr
        i = bisect_left(lst, key)
        if i < len(lst) and lst[i] == key:
            del lst[i]

    def _new_block(self, addr: int, size: int, stream: int, small: bool,
                   seg: Optional[_Expandable] = None, mapped: bool = True) -> _Block:
        b = _Block(addr, size, stream, small, seg, mapped)
        self._by_addr[addr] = b
        return b

    def _move(self, b: _Block, addr: int) -> None:
        if self._by_addr.get(b.addr) is b:
            del self._by_addr[b.addr]
        b.addr = addr
        self._by_addr[addr] = b

    # -- the rules ----------------------------------------------------------------------------
    def _get_free_block(self, small: bool, stream: int, size: int) -> Optional[_Block]:
        """ALLOC ``get_free_block``: best fit, the smallest cached block of the stream's pool
        >= size (``lower_bound``), except an oversize block (>= max_split_size) for a request
        below it, or one larger than request + max_non_split_rounding."""
        cfg = self.config
        lst = self._pool(small, stream).blocks
        i = bisect_left(lst, (size, -1))
        if i >= len(lst):
            return None
        b = self._by_addr[lst[i][1]]
        if b.seg is not None:
            if cfg.expandable_segments:
                # "for the purposes of best fit we consider its size to be the size it can
                # expand to"
                def esize(x: _Block) -> int:
                    n = x.next
                    return x.size + (n.size if n is not None and not n.mapped else 0)

                while b.seg is not None and i + 1 < len(lst):
                    nb = self._by_addr[lst[i + 1][1]]
                    if esize(nb) >= esize(b):
                        break
                    i, b = i + 1, nb
            else:  # expandable segments turned off: only non-expandable blocks
                while i < len(lst) and self._by_addr[lst[i][1]].seg is not None:
                    i += 1
                if i >= len(lst):
                    return None
                b = self._by_addr[lst[i][1]]
        mss = cfg.mss
        if size < mss and b.size >= mss:
            return None
        if size >= mss and b.size >= size + cfg.max_non_split_rounding:
            return None
        del lst[i]
        return b

    def _should_split(self, b: _Block, size: int) -> bool:
        """ALLOC ``should_split``: small pool or expandable segments: a remainder of at least
        kMinBlockSize; large pool: request below max_split_size and remainder > kSmallSize."""
        remaining = b.size - size
        if b.small or self.config.expandable_segments:
            return remaining >= K_MIN_BLOCK_SIZE
        return size < self.config.mss and remaining > K_SMALL_SIZE

    def _alloc_found_block(self, b: _Block, size: int, orig: int, split: bool) -> _Block:
        """ALLOC ``alloc_found_block``: split the front ``size`` bytes off when asked (the
        remainder stays cached), mark allocated, count allocated/active/requested bytes."""
        if split:
            rest = b
            b = _Block(rest.addr, size, rest.stream, rest.small, rest.seg, True)
            b.prev = rest.prev
            if b.prev is not None:
                b.prev.next = b
            b.next = rest
            rest.prev = b
            self._move(rest, rest.addr + size)
            self._by_addr[b.addr] = b
            rest.size -= size
            self._insert(rest)
        b.allocated = True
        b.requested = orig
        st = self.stats
        st.allocated_bytes.add(b.size)
        st.active_bytes.add(b.size)
        st.requested_bytes.add(orig)
        return b

    def _try_merge(self, dst: _Block, src: Optional[_Block]) -> int:
        """ALLOC ``try_merge_blocks``: absorb a free neighbour in the same mapping state."""
        if src is None or src.allocated or dst.mapped != src.mapped:
            return 0
        self._remove(src)
        if self._by_addr.get(src.addr) is src:
            del self._by_addr[src.addr]
        if dst.prev is src:  # [src dst]
            self._move(dst, src.addr)
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:  # [dst src]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    def _fits(self, n: int) -> bool:
        return self.capacity is None or self.stats.reserved_bytes.current + n <= self.capacity

    def _alloc_block(self, small: bool, stream: int, size: int, alloc_size: int, *,
                     retry: bool, force: bool = False) -> Optional[_Block]:
        """ALLOC ``alloc_block``: a new cudaMalloc segment of ``get_allocation_size`` bytes (or
        pages mapped into an expandable segment); fails when the capacity is exceeded."""
        st = self.stats
        if retry:
            st.num_alloc_retries += 1
        if self.config.expandable_segments:
            return self._try_allocate_expandable(small, stream, size, force)
        if not force and not self._fits(alloc_size):
            return None
        b = self._new_block(self._next_addr, alloc_size, stream, small)
        self._next_addr += alloc_size
        st.reserved_bytes.add(alloc_size)
        st.segment.add(1)
        st.num_device_alloc += 1
        return b

    def _release_block(self, b: _Block) -> None:
        """ALLOC ``release_block``: cudaFree a whole cached segment."""
        self._remove(b)
        self._by_addr.pop(b.addr, None)
        st = self.stats
        st.reserved_bytes.add(-b.size)
        st.segment.add(-1)
        st.num_device_free += 1

    def _release_available_cached_blocks(self, small: bool, stream: int, size: int) -> bool:
        """ALLOC ``release_available_cached_blocks``: only with a max_split_size: free the
        smallest cached oversize block >= max(size, max_split_size), else oversize blocks from
        the largest down until that many bytes are freed."""
        mss = self.config.mss
        if mss == float("inf") or self.config.expandable_segments:
            return False
        key = max(size, int(mss))
        lst = self._pool(small, stream).blocks
        i = bisect_left(lst, (key, -1))
        if i < len(lst):
            self._release_block(self._by_addr[lst[i][1]])
            return True
        released = 0
        j = len(lst) - 1
        while j >= 0 and released < key:
            b = self._by_addr[lst[j][1]]
            if b.size < mss:
                break
            released += b.size
            if not b.is_split():
                self._release_block(b)
            j -= 1
        return released >= key

    def _release_cached_blocks(self) -> None:
        """ALLOC ``release_cached_blocks`` -> ``release_blocks`` for the large then the small
        pool: every free block that is a whole segment (no prev/next) is cudaFree'd; free
        blocks of expandable segments unmap their whole pages (``unmap_block``) and a segment
        left wholly unmapped is released (``release_expandable_segment``)."""
        for small in (False, True):
            for (is_small, _stream), pool in list(self._pools.items()):
                if is_small != small:
                    continue
                to_unmap = []
                for _size, addr in list(pool.blocks):
                    b = self._by_addr[addr]
                    if b.seg is not None:
                        to_unmap.append(b)
                    elif not b.is_split():
                        self._release_block(b)
                for b in to_unmap:
                    self._unmap_block(b)
                    if not b.is_split() and not b.mapped:
                        self._remove(b)
                        self._by_addr.pop(b.addr, None)

    # -- expandable segments ------------------------------------------------------------------
    def _page(self, small: bool) -> int:
        """ALLOC ``find_expandable_block``: ``segment_size = pool->is_small ? kSmallBuffer :
        kLargeBuffer`` (the page granularity of an expandable segment)."""
        return K_SMALL_BUFFER if small else self.config.large_segment_size

    def _find_expandable_block(self, small: bool, stream: int, size: int) -> _Block:
        """ALLOC ``find_expandable_block``: the lowest-address run of free + unmapped space of
        at least ``size`` in the stream's segments, else a new segment (address space of
        1 1/8 the device memory, nothing mapped)."""
        pool = self._pool(small, stream)

        def allocatable(x: Optional[_Block]) -> bool:
            return x is not None and not x.allocated

        for addr in pool.unmapped:
            c = self._by_addr[addr]
            if allocatable(c.prev) and c.prev is not None:
                c = c.prev
            got, x = 0, c  # type: int, Optional[_Block]
            while got < size and allocatable(x):
                assert x is not None
                got += x.size
                x = x.next
            if got >= size:
                return c
        page = self._page(small)
        total = self.capacity if self.capacity is not None else 1 << 44
        pages = -(-(total + total // 8) // page)
        seg = _Expandable(self._next_addr, page)
        c = self._new_block(self._next_addr, pages * page, stream, small, seg, mapped=False)
        self._next_addr += pages * page + page
        self._insert(c)
        return c

    def _map_block(self, b: _Block, size: int, force: bool) -> bool:
        """ALLOC ``map_block``: map the pages that cover the first ``size`` bytes of an
        unmapped range (``ExpandableSegment::map``), split off the rest, merge with free
        neighbours; reserved grows by the mapped pages."""
        seg = b.seg
        assert seg is not None and not b.mapped
        page = seg.page
        off = b.addr - seg.base
        begin = off // page
        end = -(-(off + size) // page)
        mapped = (end - begin) * page
        if not force and not self._fits(mapped):
            return False
        self._remove(b)
        b.mapped = True
        if mapped < b.size:
            rest = self._new_block(b.addr + mapped, b.size - mapped, b.stream, b.small, seg,
                                   mapped=False)
            rest.prev, rest.next = b, b.next
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            self._insert(rest)
            b.size = mapped
        self._try_merge(b, b.prev)
        self._try_merge(b, b.next)
        self._insert(b)
        st = self.stats
        st.reserved_bytes.add(mapped)
        st.num_device_alloc += 1
        return True

    def _try_allocate_expandable(self, small: bool, stream: int, size: int,
                                 force: bool) -> Optional[_Block]:
        """ALLOC ``try_allocate_expandable_block``."""
        c = self._find_expandable_block(small, stream, size)
        if not c.mapped and not self._map_block(c, min(c.size, size), force):
            return None
        while c.size < size:
            nxt = c.next
            assert nxt is not None
            if not self._map_block(nxt, min(size - c.size, nxt.size), force):
                return None
            c = nxt
        self._remove(c)
        return c

    def _unmap_block(self, b: _Block) -> None:
        """ALLOC ``unmap_block``: unmap the whole pages inside a free block
        (``ExpandableSegment::unmap``), keeping the partial pages before/after as free
        blocks; reserved shrinks by the pages unmapped."""
        seg = b.seg
        assert seg is not None
        page = seg.page
        begin = -(-(b.addr - seg.base) // page)
        end = (b.addr + b.size - seg.base) // page
        if begin >= end:
            return
        self._remove(b)
        start = seg.base + begin * page
        size = (end - begin) * page
        before = start - b.addr
        if before > 0:
            bf = _Block(b.addr, before, b.stream, b.small, seg, True)
            bf.prev, bf.next = b.prev, b
            if b.prev is not None:
                b.prev.next = bf
            b.prev = bf
            self._move(b, start)
            self._by_addr[bf.addr] = bf
            self._insert(bf)
        after = b.size - before - size
        if after > 0:
            af = self._new_block(start + size, after, b.stream, b.small, seg, True)
            af.prev, af.next = b, b.next
            if b.next is not None:
                b.next.prev = af
            b.next = af
            self._insert(af)
        b.size = size
        b.mapped = False
        self._try_merge(b, b.prev)
        self._try_merge(b, b.next)
        self._insert(b)
        st = self.stats
        st.reserved_bytes.add(-size)
        st.num_device_free += 1


@dataclass(frozen=True)
class ReplayResult:
    """The three figures of one replay, each labelled by the counter it mirrors."""

    max_memory_allocated: int  # torch.cuda.max_memory_allocated()
    max_memory_reserved: int  # torch.cuda.max_memory_reserved()
    num_alloc_retries: int
    num_ooms: int
    segments_peak: int

    @property
    def reserve_ratio(self) -> float:
        """reserved peak / allocated peak (1.0 for an empty replay)."""
        return (self.max_memory_reserved / self.max_memory_allocated
                if self.max_memory_allocated else 1.0)


def replay(events: Iterable[Sequence[object]], config: AllocatorConfig | str | None = None, *,
           capacity: Optional[int] = None) -> ReplayResult:
    """Replay ``events`` (see :meth:`CachingAllocator.replay`) through a fresh allocator."""
    alloc = CachingAllocator(config, capacity=capacity)
    st = alloc.replay(events)
    return ReplayResult(max_memory_allocated=st.allocated_bytes.peak,
                        max_memory_reserved=st.reserved_bytes.peak,
                        num_alloc_retries=st.num_alloc_retries, num_ooms=st.num_ooms,
                        segments_peak=st.segment.peak)


#: The irreducible-reserve (floor) rule and its constants live in
#: :mod:`fmest.physics.device_terms` beside the reserve rules that use them (one import
#: direction: this module imports device_terms); re-exported here under their old names.


@dataclass(frozen=True)
class FloorResult:
    """The reserve the allocator cannot give back, measured in one replay (fmest issue 22;
    :func:`measure_floor`). All in bytes."""

    max_memory_allocated: int
    max_memory_reserved: int  # unlimited capacity
    #: ``requested_bytes`` (the tensors' own sizes) at the moment ``allocated_bytes`` is at its
    #: peak with the most held beyond them (the peak recurs every step)
    requested_at_peak: int
    #: reserved bytes after a full release (``release_cached_blocks``) at that moment
    held_at_peak: int
    #: reserved bytes once the next request after that release that no cached block serves has
    #: mapped its fresh segment (= held_at_peak when no request after the peak misses)
    held_at_next_miss: int
    #: the smallest capacity (cudaMalloc-able bytes, on a ``granularity`` grid) whose replay
    #: raises no OOM: the allocator's own fit criterion, releases included
    min_capacity: int

    @property
    def at_peak(self) -> int:
        """Fragmentation + rounding held at the allocated peak (held - requested)."""
        return self.held_at_peak - self.requested_at_peak

    @property
    def at_next_miss(self) -> int:
        return self.held_at_next_miss - self.requested_at_peak


def _replay_to(events: Sequence[Sequence[object]], config: AllocatorConfig, stop: int,
               peak: int = -1) -> tuple[CachingAllocator, list[tuple[int, int, int]]]:
    """A fresh allocator replayed through ``events[:stop]``; with ``peak``, also each moment
    a malloc brings ``allocated_bytes`` to ``peak``: (event index + 1, irreducible bytes,
    requested bytes) there."""
    a = CachingAllocator(config)
    malloc, free = a.malloc, a.free
    at_peak: list[tuple[int, int, int]] = []
    for i, ev in enumerate(events[:stop]):
        op = ev[0]
        if op == "m":
            malloc(ev[1], int(ev[2]), int(ev[3]) if len(ev) > 3 else 0)  # type: ignore
            if a.stats.allocated_bytes.current == peak:
                at_peak.append((i + 1, a.irreducible_bytes(), a.stats.requested_bytes.current))
        elif op == "f":
            free(ev[1])
        elif op == "e":
            a.empty_cache()
    return a, at_peak


def measure_floor(events: Sequence[Sequence[object]],
                  config: AllocatorConfig | str | None = None, *,
                  granularity: int = K_ROUND_LARGE) -> FloorResult:
    """The irreducible reserve of a program (fmest issue 22), three ways:

    * at the allocated peak: :meth:`CachingAllocator.irreducible_bytes` (what a full release
      leaves) at each event where ``allocated_bytes`` reaches its peak, the largest excess
      over the requested bytes kept (a later step reaches the same peak over segments packed
      by the earlier ones);
    * at the next miss: release everything cached there (``release_cached_blocks``), replay
      on to the next request no cached block serves, and read the reserved bytes once its fresh
      segment is mapped (a caching allocator can only fail on such a request);
    * the smallest capacity whose capped replay has no OOM (bisection on a ``granularity``
      grid between the allocated and the unlimited reserved peak; the replay releases and
      retries as ALLOC ``malloc`` does, so this is the capacity at which the step fits).

    Three to ~15 replays: a measuring tool for ``scripts/derive_allocator_reserve.py``, not the
    estimate path."""
    cfg = config if isinstance(config, AllocatorConfig) else AllocatorConfig.parse(config)
    events = list(events)
    free_run = CachingAllocator(cfg)
    free_run.replay(events)
    peak = free_run.stats.allocated_bytes.peak
    top = free_run.stats.reserved_bytes.peak
    # the allocated peak recurs every step, each time over differently packed segments: the
    # moment whose live segments hold the most beyond the tensors is the one kept
    _, moments = _replay_to(events, cfg, len(events), peak)
    nxt, held, requested = max(moments, key=lambda m: m[1] - m[2])
    a, _ = _replay_to(events, cfg, nxt)
    a._release_cached_blocks()
    held_next = a.stats.reserved_bytes.current
    for ev in events[nxt:]:
        if ev[0] == "m":
            before = a.stats.num_device_alloc
            a.malloc(ev[1], int(ev[2]), int(ev[3]) if len(ev) > 3 else 0)  # type: ignore
            if a.stats.num_device_alloc != before:
                held_next = a.stats.reserved_bytes.current
                break
        elif ev[0] == "f":
            a.free(ev[1])
        elif ev[0] == "e":
            a.empty_cache()
    g = max(1, granularity)
    lo = ((peak - 1) // g) * g  # below the allocated peak nothing fits: an OOM
    hi = -(-top // g) * g  # at the unlimited peak nothing is ever released: no OOM
    while hi - lo > g:
        mid = lo + ((hi - lo) // g // 2) * g
        if replay(events, cfg, capacity=mid).num_ooms:
            lo = mid
        else:
            hi = mid
    return FloorResult(max_memory_allocated=peak, max_memory_reserved=top,
                       requested_at_peak=requested, held_at_peak=held,
                       held_at_next_miss=held_next, min_capacity=hi)


@dataclass(frozen=True)
class SnapshotReplay:
    """A recorded ``torch.cuda.memory._snapshot()`` replayed (:func:`replay_snapshot`): what the
    real allocator reached over the recorded window beside what this simulator reaches on the
    same requests."""

    recorded_reserved_peak: int  # the real segments: before the window + segment_alloc events
    simulated: ReplayResult
    events: int  # alloc and free events replayed
    live_at_start: int  # blocks in use when recording began (allocated first, in one burst)
    streams: int

    @property
    def reserved_error(self) -> float:
        """simulated / recorded reserved peak - 1."""
        rec = self.recorded_reserved_peak
        return self.simulated.max_memory_reserved / rec - 1.0 if rec else 0.0


def snapshot_events(snapshot: dict, device: int = 0) -> tuple[list[tuple], int, int]:
    """The allocator events of a ``torch.cuda.memory._snapshot()`` (recorded with
    ``torch.cuda.memory._record_memory_history``) as :meth:`CachingAllocator.replay` takes
    them, and the reserved bytes held before the recorded window.

    The window starts with blocks already in use (the weights, built before recording began):
    they are the snapshot's blocks still allocated at the end that no ``alloc`` event of the
    window made, plus the blocks the window frees without having allocated them; they are
    requested first, in address order. ``alloc`` events carry the size asked for
    (``TraceEntry::ALLOC`` records the request); a free is replayed at ``free_requested``
    (what a block freed on its own stream waits for: ``free_completed`` follows at once when
    no other stream used it). Returns (events, bytes of the segments that existed before the
    window, blocks in use at its start)."""
    traces = snapshot.get("device_traces") or []
    if device >= len(traces):
        raise InputError("snapshot.device_traces",
                         f"no allocation history for device {device} (devices recorded: "
                         f"{len(traces)}); record it with "
                         "torch.cuda.memory._record_memory_history() before the steps")
    trace = traces[device]
    segments = [s for s in snapshot.get("segments", []) if s.get("device", device) == device]
    allocated_in_window = {e["addr"] for e in trace if e["action"] == "alloc"}
    live: dict[int, tuple[int, int]] = {}
    for seg in segments:
        for b in seg.get("blocks", []):
            if b.get("state") == "active_allocated" and b["address"] not in allocated_in_window:
                live[b["address"]] = (b.get("requested_size") or b["size"], seg.get("stream", 0))
    seen: set[int] = set()
    for e in trace:
        if e["action"] == "alloc":
            seen.add(e["addr"])
        elif e["action"] == "free_requested" and e["addr"] not in seen:
            live.setdefault(e["addr"], (e["size"], e.get("stream", 0)))
            seen.add(e["addr"])
    events: list[tuple] = [("m", ("pre", a), size, stream)
                           for a, (size, stream) in sorted(live.items())]
    handles: dict[int, object] = {a: ("pre", a) for a in live}
    previous = None
    for n, e in enumerate(trace):
        act = e["action"]
        if act == "alloc":
            handles[e["addr"]] = ("t", n)
            events.append(("m", ("t", n), e["size"], e.get("stream", 0)))
        elif act == "free_requested" and e["addr"] in handles:
            events.append(("f", handles.pop(e["addr"])))
        elif act == "segment_free" and previous not in ("segment_free", "oom"):
            # a run of segment frees outside an OOM's retry is an empty_cache() (ALLOC
            # emptyCache -> release_cached_blocks frees every cached segment at once)
            events.append(("e",))
        previous = act
    new_segments = sum(e["size"] for e in trace if e["action"] == "segment_alloc")
    freed_segments = sum(e["size"] for e in trace if e["action"] == "segment_free")
    held_before = sum(s["total_size"] for s in segments) - new_segments + freed_segments
    return events, held_before, len(live)


def replay_snapshot(snapshot: dict, config: AllocatorConfig | str | None = None, *,
                    device: int = 0) -> SnapshotReplay:
    """Replay a recorded snapshot's requests through this simulator (``config``: None = the
    settings it was recorded under, its ``allocator_settings``) and set the result beside the
    real allocator's reserved peak over the same window (the segments held before it plus
    each ``segment_alloc``, less each ``segment_free``). The check that the rules above are
    PyTorch's: docs/allocator.md, "Checked against a recorded GPU trace"."""
    events, held_before, live = snapshot_events(snapshot, device)
    if config is None:
        settings = snapshot.get("allocator_settings") or {}
        config = settings.get("PYTORCH_CUDA_ALLOC_CONF") or None
    trace = snapshot["device_traces"][device]
    reserved = peak = held_before
    for e in trace:
        if e["action"] == "segment_alloc":
            reserved += e["size"]
            peak = max(peak, reserved)
        elif e["action"] == "segment_free":
            reserved -= e["size"]
    streams = len({e.get("stream", 0) for e in trace} | {0})
    return SnapshotReplay(recorded_reserved_peak=peak, simulated=replay(events, config),
                          events=sum(1 for e in events if e[0] in ("m", "f")) - live,
                          live_at_start=live, streams=streams)


def nvidia_smi_bytes(reserved_bytes: int, *, world_size: int = 1) -> int:
    """What nvidia-smi shows for the process: the allocator's reserved bytes plus the memory
    outside it (CUDA context with the step's kernels, NCCL buffers: fmest.physics.device_terms)."""
    from fmest.physics.device_terms import cuda_context_bytes

    return int(reserved_bytes + cuda_context_bytes(world_size))


#: the padded-length grid (fmest issue 20): core/fmest/data/allocator_reserve.json ``padded``
#: (``python scripts/derive_allocator_reserve.py --padded``): replays of LoRA steps whose
#: micro-batches are padded to their longest sample, lengths lognormal(mean, cv) under a cap.
_PADDED_TABLE = Path(__file__).resolve().parent / "data" / "allocator_reserve.json"
#: the coefficient of variation assumed where a job states a mean length but no spread (the
#: grid's middle column; docs/allocator.md)
PADDED_DEFAULT_CV = 0.6


@lru_cache(maxsize=1)
def _padded_rows() -> dict[tuple[str, int, str], list[tuple[float, float, float]]]:
    """The table's rows by (checkpointing mode, batch, truncation): (log mean/cap, log cv of
    the lengths as trained, after the cap; growth over transient) for the nearest-point
    lookup."""
    data = json.loads(_PADDED_TABLE.read_text(encoding="utf-8")).get("padded", {})
    out: dict[tuple[str, int, str], list[tuple[float, float, float]]] = {}
    for r in data.get("rows", []):
        key = (r["activation_checkpointing"], int(r["batch"]), r["truncation"])
        out.setdefault(key, []).append((math.log(r["trained_mean_over_cap"]),
                                        math.log(max(1e-3, r["trained_cv"])),
                                        float(r["growth_over_transient"])))
    return out


@lru_cache(maxsize=1024)
def padded_growth_fraction(mean_over_cap: float, cv: Optional[float], *,
                           truncation: str = "truncate", micro_batch: int = 1,
                           checkpointing: str = "none") -> float:
    """Growth of ``max_memory_reserved`` of pad-to-longest batches over the same job padded to
    the cap every step, as a fraction of one micro-batch's transient bytes at the cap (its
    activations and loss). ``mean_over_cap`` and ``cv``: the sample lengths as trained (after
    the cap: ``workload.avg_seq_len / seq_len``, ``seq_len_std / avg_seq_len``). The nearest
    row of the replayed grid (log mean/cap, log cv), for
    the nearest replayed micro-batch size (log scale) and the checkpointing mode (``full``;
    ``none`` and ``selective`` keep the layer temporaries: ``none``). 0 without a table."""
    rows = _padded_rows()
    if not rows or mean_over_cap <= 0:
        return 0.0
    ac = "full" if checkpointing == "full" else "none"
    batches = sorted({b for (a, b, t) in rows if a == ac and t == truncation})
    if not batches:
        return 0.0
    lb = math.log(max(1, micro_batch))
    b = min(batches, key=lambda x: abs(math.log(x) - lb))
    x = math.log(mean_over_cap)
    y = math.log(max(1e-3, cv) if cv is not None else PADDED_DEFAULT_CV)
    best = min(rows[(ac, b, truncation)], key=lambda r: (r[0] - x) ** 2 + (r[1] - y) ** 2)
    return best[2]


def padded_growth_of(job, stack) -> float:
    """The reserve growth of pad-to-longest batches (a fraction of one micro-batch's transient
    bytes at ``seq_len``, :func:`padded_growth_fraction`) when the job states its mean sample
    length below ``seq_len`` (``workload.avg_seq_len``; ``seq_len_std`` its spread) and its
    batches are padded to the longest (:func:`fmest.stacks.padding_of`); 0 for fixed shapes
    (``max_length``, ``packed``) or no stated length distribution. Shared by memory_theory and
    the traced method."""
    from fmest.stacks import padding_of

    training, w = job.training, job.workload
    if w.avg_seq_len is None or padding_of(training, stack) != "longest":
        return 0.0
    cv = w.seq_len_std / w.avg_seq_len if w.seq_len_std is not None else None
    return padded_growth_fraction(w.avg_seq_len / training.seq_len, cv,
                                  truncation=training.truncation or "truncate",
                                  micro_batch=training.micro_batch_size,
                                  checkpointing=training.activation_checkpointing)
