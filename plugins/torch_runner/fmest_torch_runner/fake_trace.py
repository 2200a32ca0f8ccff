"""Fake mode: the steps traced under ``FakeTensorMode`` on CPU (no memory, no compute), the
live-storage tracker (:mod:`fmest_torch_runner.tracker`) giving per-phase peaks and a breakdown;
with ``RunSpec.fsdp_world_size > 1`` under FSDP2 ``fully_shard`` on a fake process group.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator

from fmest_torch_runner.model_builder import build_model, decoder_layers
from fmest_torch_runner.records import RunResult, RunSpec, Unsupported, torch_dtype
from fmest_torch_runner.steps import count_params, fill_from_tracker, train_steps

if TYPE_CHECKING:
    import torch
    from torch.distributed.device_mesh import DeviceMesh

#: the window FSDP tracing ignores: FSDPMemTracker reports phantom optimizer state there
#: (pitfall i); steady-state step 2 holds the same optimizer-state bytes
FSDP_IGNORED_WINDOW = "s1_optimizer"


@contextlib.contextmanager
def patched_mask_helper() -> Iterator[None]:
    """Pitfall (c): under fake tensors ``find_packed_sequence_indices`` cannot read values and
    keeps a packed-sequence mask (a [b,1,s,s] tensor the real run never builds). The real run
    returns None for an unpacked batch, so return None -- only inside the trace."""
    try:
        import transformers.masking_utils as mu
    except ImportError:  # older transformers: nothing to patch
        yield
        return
    orig = getattr(mu, "find_packed_sequence_indices", None)
    if orig is None:
        yield
        return
    mu.find_packed_sequence_indices = lambda *a, **k: None
    vlm_checks = _disabled_vlm_checks()
    try:
        with vlm_checks:
            yield
    finally:
        mu.find_packed_sequence_indices = orig


@contextlib.contextmanager
def _disabled_vlm_checks() -> Iterator[None]:
    """Under fake tensors LLaVA's check that image tokens and image features agree
    (``torch_compilable_check`` on a token count) would read values; the runner builds the
    batch so that they agree, so skip the check -- only inside the trace."""
    try:
        import transformers.models.llava.modeling_llava as llava
    except ImportError:
        yield
        return
    orig = getattr(llava, "torch_compilable_check", None)
    if orig is None:
        yield
        return
    llava.torch_compilable_check = lambda *a, **k: None
    try:
        yield
    finally:
        llava.torch_compilable_check = orig


def largest_freed_block(events) -> int:
    """The largest allocation of ``events`` (``("m", handle, nbytes)`` / ``("f", handle)``,
    :attr:`fmest_torch_runner.tracker.StorageTracker.events`) that is freed again within them:
    the step's largest transient block (0 when nothing is freed)."""
    sizes: dict[int, int] = {}
    best = 0
    for ev in events:
        if ev[0] == "m":
            sizes[ev[1]] = int(ev[2])
        elif ev[0] == "f":
            n = sizes.pop(ev[1], 0)
            if n > best:
                best = n
    return best


def replay_into(res: RunResult, tracker: Any, alloc_conf: str = "") -> None:
    """Replay the trace's allocation events once through the caching-allocator simulator
    (:mod:`fmest.allocator`, with ``alloc_conf`` as ``PYTORCH_CUDA_ALLOC_CONF``; "" =
    defaults): ``res.reserved_peak_bytes`` becomes the simulated ``max_memory_reserved``; a
    note gives both counters. (One replay: a second, expandable-segments one for a note cost
    ~5 % of a cold estimate and was never used by the answer.)"""
    from fmest.allocator import parse_alloc_conf
    from fmest_torch_runner.tracker import replay_allocator

    base = replay_allocator(tracker, parse_alloc_conf(alloc_conf) if alloc_conf else None)
    res.reserved_peak_bytes = base.max_memory_reserved
    res.transient_block_bytes = largest_freed_block(tracker.events)
    res.notes.append(
        f"caching-allocator replay of {len(tracker.events)} events (fmest.allocator, rules of "
        f"c10/cuda/CUDACachingAllocator.cpp; PYTORCH_CUDA_ALLOC_CONF "
        f"{alloc_conf or '(default)'}): max_memory_allocated "
        f"{base.max_memory_allocated} B, max_memory_reserved {base.max_memory_reserved} B")


def run_fake(run: RunSpec, res: RunResult, round_bytes: int) -> None:
    """Trace ``run`` on fake tensors into ``res`` (FSDP2 when ``run.fsdp_world_size > 1``)."""
    if run.fsdp_world_size > 1:
        run_fake_fsdp(run, res, round_bytes)
        return
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fmest_torch_runner.layer_replication import run_replicated
    from fmest_torch_runner.tracker import StorageTracker

    with patched_mask_helper():
        # identical decoder layers: a few traced, the rest replicated (same results)
        tracker = run_replicated(run, res, round_bytes)
        if tracker is None:
            fake_mode = FakeTensorMode()
            model = build_model(run, "fake", fake_mode)
            count_params(model, res)
            with fake_mode:
                tracker = StorageTracker(round_bytes=round_bytes)
                with tracker:
                    res.step_seconds = train_steps(model, run, "fake", tracker)
    fill_from_tracker(res, tracker)
    res.peak_bytes = res.tracker_peak_bytes
    replay_into(res, tracker, run.alloc_conf)
    res.notes.append("fake trace: CPU kernel semantics, storage sizes exact"
                     + (f", rounded up to {round_bytes} B" if round_bytes > 1 else ""))


# -- FSDP2 on a fake process group ---------------------------------------------------------

@contextlib.contextmanager
def _fake_process_group(world_size: int) -> Iterator[DeviceMesh]:
    """A ``"fake"`` process group (no communication) of ``world_size`` ranks, this process
    rank 0, and a 1-D CPU device mesh over it -- built here, BEFORE FakeTensorMode is entered
    (pitfall h: ``init_device_mesh`` under fake mode fails on ``.tolist()``). The group is
    destroyed on exit so that later traces in the same process work."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore  # registers "fake"

    if dist.is_initialized():
        raise Unsupported("a torch.distributed process group is already initialized in this "
                          "process; the FSDP trace needs its own fake one")
    dist.init_process_group("fake", world_size=world_size, rank=0, store=FakeStore())
    try:
        yield init_device_mesh("cpu", (world_size,))
    finally:
        dist.destroy_process_group()


def _fully_shard(model: torch.nn.Module, run: RunSpec, mesh: DeviceMesh) -> None:
    """``fully_shard`` each decoder layer, then the root (FSDP2's recommended wrapping); amp =
    fp32 sharded weights + ``MixedPrecisionPolicy(param_dtype=autocast dtype, reduce fp32)``."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kw: dict[str, Any] = {"mesh": mesh}
    if run.precision == "amp" and run.autocast_dtype:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch_dtype(run.autocast_dtype),
                                               reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, **kw)
    fully_shard(model, **kw)


def run_fake_fsdp(run: RunSpec, res: RunResult, round_bytes: int) -> None:
    """Per-rank (rank 0) memory of FSDP2 full sharding over ``run.fsdp_world_size`` ranks:
    fake process group + ``fully_shard`` per decoder layer and root, two traced steps, the
    tracker following ``UntypedStorage.resize_`` (FSDP frees unsharded weights by
    ``resize_(0)``). The peak of record ignores the step-1 optimizer window (pitfall i)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fmest_torch_runner.tracker import StorageTracker

    if run.steps < 2:
        raise Unsupported("FSDP tracing needs two steps (the step-1 optimizer window is "
                          "ignored)")
    world = run.fsdp_world_size
    with patched_mask_helper(), _fake_process_group(world) as mesh:
        fake_mode = FakeTensorMode()
        model = build_model(run, "fake", fake_mode)
        count_params(model, res)
        with fake_mode:
            _fully_shard(model, run, mesh)
            tracker = StorageTracker(round_bytes=round_bytes, track_resize=True)
            with tracker:
                res.step_seconds = train_steps(model, run, "fake", tracker)
        del model
    fill_from_tracker(res, tracker)
    replay_into(res, tracker, run.alloc_conf)
    kept = {w: p for w, p in res.phase_peaks_bytes.items() if w != FSDP_IGNORED_WINDOW}
    res.peak_window, res.peak_bytes = max(kept.items(), key=lambda kv: kv[1])
    res.breakdown_bytes = dict(res.phase_breakdowns[res.peak_window])
    grow, shrink = tracker.resizes
    if grow == 0 or shrink == 0:
        raise RuntimeError(f"FSDP trace saw no UntypedStorage.resize_ (grow {grow}, shrink "
                           f"{shrink}): unsharded weights would be miscounted")
    mp = (f", MixedPrecisionPolicy {run.autocast_dtype}/fp32"
          if run.precision == "amp" and run.autocast_dtype else "")
    res.notes.append(
        f"fake trace of FSDP2 full sharding over {world} ranks (fake process group, fully_shard per "
        f"decoder layer + root{mp}); "
        f"per-rank (rank 0) bytes; {grow} storage grows / {shrink} frees by resize_; "
        f"window {FSDP_IGNORED_WINDOW} ignored for the peak; CPU kernel semantics"
        + (f", rounded up to {round_bytes} B" if round_bytes > 1 else ""))
