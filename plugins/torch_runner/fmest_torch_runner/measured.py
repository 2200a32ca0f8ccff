"""Real steps, measured: ``cpu`` under ``torch.profiler`` (allocator truth per phase) and
``cuda`` by ``torch.cuda.max_memory_allocated``/``max_memory_reserved`` per phase. The
live-storage tracker runs alongside both for the breakdown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from fmest_torch_runner.model_builder import build_model
from fmest_torch_runner.records import RunResult, RunSpec, Unsupported
from fmest_torch_runner.steps import count_params, fill_from_tracker, train_steps

if TYPE_CHECKING:
    from torch.profiler import profile


def _allocator_windows(prof: profile) -> dict[str, int]:
    """Max ``total_allocated`` of the CPU allocator events inside each ``fmest::`` window."""
    from torch._C._profiler import _EventType

    windows: list[tuple[int, int, str]] = []
    allocs: list[tuple[int, int, int]] = []
    results = prof.profiler.kineto_results if prof.profiler is not None else None
    assert results is not None, "the profiler session has not ended: no results yet"
    stack = list(results.experimental_event_tree())
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        if n.tag == _EventType.Allocation:
            ef: Any = n.extra_fields  # the allocation's fields (_ExtraFields_Allocation)
            if str(ef.device).startswith("cpu"):
                allocs.append((n.start_time_ns, ef.total_allocated, ef.alloc_size))
        elif n.name.startswith("fmest::"):
            windows.append((n.start_time_ns, n.end_time_ns, n.name[len("fmest::"):]))
    allocs.sort()
    # c10's profiled CPU memory reporter keeps one process-wide counter: bytes allocated
    # under an earlier profiler session and still alive are already in it. Subtract the
    # counter as it stood before this session's first allocation.
    base = allocs[0][1] - allocs[0][2] if allocs else 0
    out: dict[str, int] = {}
    for start, end, name in windows:
        vals = [a - base for t, a, _size in allocs if start <= t <= end]
        if vals:
            out[name] = max(out.get(name, 0), max(vals))
    return out


def run_cpu(run: RunSpec, res: RunResult) -> None:
    """Real steps on CPU; truth = bytes of tensors alive at the start + max of the allocator's
    ``total_allocated`` per phase (the CPU analogue of ``torch.cuda.max_memory_allocated``)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from fmest_torch_runner.tracker import StorageTracker

    model = build_model(run, "cpu")
    count_params(model, res)
    tracker = StorageTracker()
    box: dict[str, record_function] = {}

    def on_phase(window: Optional[str], kind: Optional[str]) -> None:
        if window is None:
            box.pop("rf").__exit__(None, None, None)
        else:
            rf = record_function(f"fmest::{window}")
            rf.__enter__()
            box["rf"] = rf

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with tracker:
            # start-of-run bytes: params, buffers, inputs (registered inside train_steps)
            res.step_seconds = train_steps(model, run, "cpu", tracker, on_phase=on_phase)
    fill_from_tracker(res, tracker)
    res.start_bytes = start = tracker.start_bytes
    per_window = _allocator_windows(prof)
    res.phase_peaks_bytes = {w: start + v for w, v in per_window.items()}
    if res.phase_peaks_bytes:
        res.peak_window, res.peak_bytes = max(res.phase_peaks_bytes.items(), key=lambda kv: kv[1])
    res.notes.append("truth = tensor bytes alive at start + max CPU allocator total_allocated "
                     "per phase (torch.profiler profile_memory); breakdown from the tracker; "
                     "step seconds include profiler overhead")


def run_cuda(run: RunSpec, res: RunResult) -> None:
    """UNTESTED ON HARDWARE: written without a GPU (see docs/torch_runner.md)."""
    import torch

    from fmest_torch_runner.tracker import StorageTracker

    if not torch.cuda.is_available():
        raise Unsupported("cuda mode needs a CUDA build of torch and a visible GPU")
    torch.cuda.empty_cache()
    model = build_model(run, "cuda")
    count_params(model, res)
    tracker = StorageTracker(round_bytes=512)
    peaks: dict[str, int] = {}
    reserved: dict[str, int] = {}
    current: dict[str, str] = {}

    def on_phase(window: Optional[str], kind: Optional[str]) -> None:
        if window is None:
            torch.cuda.synchronize()
            w = current.pop("window")
            peaks[w] = max(peaks.get(w, 0), torch.cuda.max_memory_allocated())
            reserved[w] = max(reserved.get(w, 0), torch.cuda.max_memory_reserved())
        else:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            current["window"] = window

    with tracker:
        res.step_seconds = train_steps(model, run, "cuda", tracker, on_phase=on_phase,
                                       sync=torch.cuda.synchronize)
    fill_from_tracker(res, tracker)
    res.phase_peaks_bytes = peaks
    res.peak_window, res.peak_bytes = max(peaks.items(), key=lambda kv: kv[1])
    res.reserved_peak_bytes = max(reserved.values())
    res.notes.append("cuda: torch.cuda.max_memory_allocated/reserved per phase "
                     "(code path untested on hardware)")
