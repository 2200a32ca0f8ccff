"""A lean live-storage tracker: the bytes of every tensor storage alive, op by op.

A :class:`TorchDispatchMode` sees every op's outputs; each new ``UntypedStorage`` is recorded
with its size and a category, and a ``weakref.finalize`` on the storage removes it when the
last tensor using it dies. This works the same on real tensors and under ``FakeTensorMode``
(fake storages have sizes but no memory), which is what makes a fake trace exact: the peak
is the maximum over ops of the sum of live storages, as the caching allocator would see it
(modulo its block rounding, optional here via ``round_bytes``).

Categories come from the phase an allocation happened in (``forward`` -> activations,
``backward``/``optimizer`` -> temporaries) and are corrected at each phase end: storages then
held as ``.grad`` become ``grads``, those held in the optimizer's state ``optimizer_state``.
The correction is also applied to the snapshots taken at the phase's peak when the storage was
already alive then (allocation sequence number <= the peak's), so breakdowns at peaks are right.

Every allocation and free is also logged in program order (``events``: ``("m", handle,
nbytes)`` with the storage's exact ``nbytes``, ``("f", handle)`` when it dies) for the
caching-allocator replay (:mod:`fmest.allocator`), which turns the trace into
``max_memory_allocated`` / ``max_memory_reserved`` figures (:func:`replay_allocator`).

Work per op is O(outputs); nothing walks modules (torch's ``MemTracker`` does, ~10-35x slower).

Tensor subclasses that wrap other tensors (``DTensor`` of FSDP2: sharded parameters, gradients,
optimizer state) are tracked through their inner tensors (``__tensor_flatten__``).
With ``track_resize=True`` the tracker also follows ``UntypedStorage.resize_`` while it is
entered (it patches the method: a storage resize is not an op the dispatch mode sees). FSDP2
allocates and frees the unsharded parameters that way (``resize_(size)`` after the all-gather,
``resize_(0)`` after use); a storage grown from 0 is counted as ``resize_category``.
"""

from __future__ import annotations

import weakref
from typing import Iterable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten

from fmest_torch_runner.records import CATEGORIES

_PHASE_CATEGORY = {"forward": "activations", "backward": "temporaries",
                   "optimizer": "temporaries", "setup": "temporaries"}


def storages_of(t) -> list:
    """The storages holding ``t``'s data: its own, or its inner tensors' for a wrapper subclass
    (DTensor -> local shard)."""
    if is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()
        out = []
        for n in names:
            inner = getattr(t, n)
            if isinstance(inner, torch.Tensor):
                out.extend(storages_of(inner))
        return out
    return [t.untyped_storage()]


class _Record:
    __slots__ = ("nbytes", "category", "seq", "alive", "handle")

    def __init__(self, nbytes: int, category: str, seq: int, handle: int) -> None:
        self.nbytes = nbytes
        self.category = category
        self.seq = seq
        self.alive = True
        self.handle = handle


class _Peak:
    """The peak of one window: total, sequence number and per-category bytes at that moment."""

    __slots__ = ("total", "seq", "by_category")

    def __init__(self) -> None:
        self.total = -1
        self.seq = -1
        self.by_category: dict[str, int] = {}


class StorageTracker(TorchDispatchMode):
    """Track live tensor storages; ``phase(name)`` opens a window whose peak is recorded.

    Enter it *inside* ``FakeTensorMode`` when tracing (so it sees fake outputs first).
    """

    def __init__(self, *, round_bytes: int = 1, track_resize: bool = False,
                 resize_category: str = "params", record: bool = False) -> None:
        super().__init__()
        self.round_bytes = max(1, int(round_bytes))
        self.track_resize = bool(track_resize)
        self.resize_category = resize_category
        self._orig_resize = None
        #: number of UntypedStorage.resize_ calls seen (grow, shrink)
        self.resizes = [0, 0]
        self._records: dict[int, _Record] = {}
        self._by_category = {c: 0 for c in CATEGORIES}
        self.total = 0
        self._seq = 0
        self.current_phase = "setup"
        self.current_window: Optional[str] = None
        self.windows: dict[str, _Peak] = {}
        self.overall = _Peak()
        self.overall_window = ""
        self.start_bytes = 0
        #: per-category bytes alive when each window last ended
        self.window_end: dict[str, dict[str, int]] = {}
        #: allocation events in program order for :mod:`fmest.allocator` (exact nbytes)
        self.events: list[tuple] = []
        self._handles = 0
        #: with ``record=True``: every state change in order, for :meth:`replay_log` (layer
        #: replication, :mod:`fmest_torch_runner.layer_replication`): ``("a", nbytes,
        #: category)`` an allocation (its ordinal = its handle - 1), ``("f", ordinal)`` a free,
        #: ``("r", ordinal, category)`` a relabel, ``("p", window, kind)`` / ``("e",)`` a
        #: phase opened / closed. None when not recording or after a resize (not logged).
        self.log: Optional[list[tuple]] = [] if record else None

    # -- bookkeeping ----------------------------------------------------------------------
    def _size(self, n: int) -> int:
        r = self.round_bytes
        return ((n + r - 1) // r) * r if r > 1 else n

    def _add(self, storage, category: str) -> None:
        key = storage._cdata
        if key in self._records or storage.nbytes() == 0:
            return
        self._add_key(key, storage.nbytes(), category)
        log = self.log
        mark = -1 if log is None else len(log)
        weakref.finalize(storage, self._free, key)
        self._check_peak()
        if log is not None and len(log) != mark:
            # a storage died (garbage collection) between this allocation and its peak check:
            # replay_log, which checks right after the allocation, could differ -- give it up
            self.log = None

    def _add_key(self, key: int, nbytes: int, category: str) -> None:
        """Record a new storage of ``nbytes`` (exact) under ``key`` (no peak check)."""
        self._seq += 1
        self._handles += 1
        rec = _Record(self._size(nbytes), category, self._seq, self._handles)
        self.events.append(("m", self._handles, nbytes))
        if self.log is not None:
            self.log.append(("a", nbytes, category))
        self._records[key] = rec
        self._by_category[category] += rec.nbytes
        self.total += rec.nbytes

    def _free(self, key: int) -> None:
        rec = self._records.pop(key, None)
        if rec is None:
            return
        if self.log is not None:
            self.log.append(("f", rec.handle - 1))
        rec.alive = False
        self._seq += 1
        self.events.append(("f", rec.handle))
        self._by_category[rec.category] -= rec.nbytes
        self.total -= rec.nbytes

    def _on_resize(self, storage, old_nbytes: int) -> None:
        new = storage.nbytes()
        if new == old_nbytes:
            return
        self.resizes[0 if new > old_nbytes else 1] += 1
        self.log = None  # resizes are not logged: the log cannot be replayed
        rec = self._records.get(storage._cdata)
        if rec is None:
            if new > 0:
                self._add(storage, self.resize_category)
            return
        self._seq += 1
        # a resize is a free of the old bytes and an allocation of the new ones
        if old_nbytes > 0:
            self.events.append(("f", rec.handle))
        if new > 0:
            self._handles += 1
            rec.handle = self._handles
            self.events.append(("m", rec.handle, new))
        newb = self._size(new) if new > 0 else 0
        self._by_category[rec.category] -= rec.nbytes
        self.total -= rec.nbytes
        if old_nbytes == 0 and new > 0:
            rec.category = self.resize_category
        rec.nbytes = newb
        self._by_category[rec.category] += newb
        self.total += newb
        if new > old_nbytes:
            self._check_peak()

    def __enter__(self):
        if self.track_resize and self._orig_resize is None:
            orig = torch.UntypedStorage.resize_
            tracker = self

            def resize_(storage, size):
                old = storage.nbytes()
                out = orig(storage, size)
                tracker._on_resize(storage, old)
                return out

            self._orig_resize = orig
            torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            if self._orig_resize is not None:
                torch.UntypedStorage.resize_ = self._orig_resize
                self._orig_resize = None

    def _check_peak(self) -> None:
        win = self.windows.get(self.current_window) if self.current_window else None
        if win is not None and self.total > win.total:
            win.total, win.seq, win.by_category = self.total, self._seq, dict(self._by_category)
        if self.total > self.overall.total:
            o = self.overall
            o.total, o.seq, o.by_category = self.total, self._seq, dict(self._by_category)
            self.overall_window = self.current_window or ""

    def register(self, tensors: Iterable, category: str) -> None:
        """Record already-existing tensors (params, buffers, inputs, states) as ``category``."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                for st in storages_of(t):
                    self._add(st, category)

    def relabel(self, tensors: Iterable, category: str) -> None:
        """Move live storages to ``category`` (also in peak snapshots taken after they were
        allocated)."""
        for st in (st for t in tensors if isinstance(t, torch.Tensor) for st in storages_of(t)):
            self._relabel_key(st._cdata, category)

    def _relabel_key(self, key: int, category: str) -> None:
        rec = self._records.get(key)
        if rec is None or rec.category == category:
            return
        if self.log is not None:
            self.log.append(("r", rec.handle - 1, category))
        old = rec.category
        self._by_category[old] -= rec.nbytes
        self._by_category[category] += rec.nbytes
        for peak in [*self.windows.values(), self.overall]:
            if peak.seq >= rec.seq and peak.by_category:
                peak.by_category[old] -= rec.nbytes
                peak.by_category[category] = peak.by_category.get(category, 0) + rec.nbytes
        rec.category = category

    def phase(self, window: str, kind: str) -> None:
        """Start window ``window`` (``s1_forward`` ...) of kind ``forward``/``backward``/
        ``optimizer``; its peak starts at the bytes alive now (re-opening keeps the old peak)."""
        if self.log is not None:
            self.log.append(("p", window, kind))
        self.current_window = window
        self.current_phase = kind
        peak = self.windows.get(window)  # a window re-opened (next micro-batch) keeps its peak
        if peak is None:
            peak = self.windows[window] = _Peak()
        if self.total > peak.total:
            peak.total, peak.seq, peak.by_category = self.total, self._seq, dict(self._by_category)

    def end_phase(self) -> None:
        if self.log is not None:
            self.log.append(("e",))
        if self.current_window is not None:
            self.window_end[self.current_window] = dict(self._by_category)
        self.current_window = None
        self.current_phase = "setup"

    def live_bytes(self) -> dict[str, int]:
        return dict(self._by_category)

    def replay_log(self, log: Iterable[tuple]) -> None:
        """Drive this (fresh, not entered) tracker through a recorded :attr:`log`: the same
        bookkeeping, in the same order, as the run that recorded it, so every result (windows,
        peaks and breakdowns, window ends, allocation ``events``) comes out identical. The
        storages are named by their handles."""
        for op in log:
            kind = op[0]
            if kind == "a":
                self._add_key(self._handles + 1, op[1], op[2])
                self._check_peak()
            elif kind == "f":
                self._free(op[1] + 1)
            elif kind == "r":
                self._relabel_key(op[1] + 1, op[2])
            elif kind == "p":
                self.phase(op[1], op[2])
            elif kind == "e":
                self.end_phase()
            else:
                raise ValueError(f"unknown tracker log entry {op!r}")

    # -- dispatch -------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        category = _PHASE_CATEGORY.get(self.current_phase, "temporaries")
        if isinstance(out, torch.Tensor):  # most ops: one tensor (no pytree walk)
            for st in storages_of(out):
                self._add(st, category)
            return out
        if isinstance(out, (tuple, list)):  # aten outputs nest only in tuples and lists
            flat: list = list(_flat_tensors(out))
        else:
            flat, _ = tree_flatten(out)
        for t in flat:
            if isinstance(t, torch.Tensor):
                for st in storages_of(t):
                    self._add(st, category)
        return out


def _flat_tensors(out) -> Iterable:
    """The tensors of a (nested) tuple/list op output, in order."""
    for o in out:
        if isinstance(o, torch.Tensor):
            yield o
        elif isinstance(o, (tuple, list)):
            yield from _flat_tensors(o)


def replay_allocator(tracker: StorageTracker, config: object = None):
    """The tracker's allocation events replayed through the caching-allocator simulator
    (:func:`fmest.allocator.replay`): a :class:`fmest.allocator.ReplayResult`."""
    from fmest.allocator import replay

    return replay(tracker.events, config)  # type: ignore[arg-type]
