"""The traced answer's caching-allocator replay (fmest.allocator on the tracker's events)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fmest.allocator import AllocatorConfig, replay  # noqa: E402
from fmest.testing import TINY_LLAMA_CONFIG  # noqa: E402
from fmest_torch_runner import traced  # noqa: E402
from fmest_torch_runner.runner import RunSpec, run  # noqa: E402
from fmest_torch_runner.tracker import StorageTracker  # noqa: E402

TINY = TINY_LLAMA_CONFIG



def test_tracker_logs_allocations_and_frees_in_order():
    tr = StorageTracker()
    with tr:
        a = torch.empty(1000)
        b = torch.empty(10)
        del a
    assert tr.events[0] == ("m", 1, 4000)
    assert tr.events[1] == ("m", 2, 40)
    assert ("f", 1) in tr.events
    del b


def test_fake_trace_carries_the_replayed_reserved_peak():
    res = run(RunSpec(hf_config=TINY, seq_len=128, micro_batch_size=2), "fake", round_bytes=512)
    assert res.status == "ok", res.error
    assert res.reserved_peak_bytes >= res.tracker_peak_bytes
    assert any("caching-allocator replay" in n for n in res.notes)
    ratio = traced.reserve_ratio(res)
    assert ratio is not None and ratio >= 1.0


def test_replayed_allocated_peak_matches_the_tracker():
    """With expandable segments every block is split down to its 512-byte-rounded size
    (should_split: remainder >= kMinBlockSize), so the replay's max_memory_allocated equals the
    tracker's peak of storages rounded to 512 B; the default settings count unsplit remainders
    too (never less)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fmest_torch_runner.model_builder import build_model
    from fmest_torch_runner.steps import train_steps

    spec = RunSpec(hf_config=TINY, seq_len=128, micro_batch_size=2)
    fake_mode = FakeTensorMode()
    model = build_model(spec, "fake", fake_mode)
    with fake_mode:
        tracker = StorageTracker(round_bytes=512)
        with tracker:
            train_steps(model, spec, "fake", tracker)
    peak = tracker.overall.total
    exp = replay(tracker.events, AllocatorConfig(expandable_segments=True))
    assert exp.max_memory_allocated == peak
    assert replay(tracker.events).max_memory_allocated >= peak


def test_reserve_component_uses_the_replay_and_the_env_override(monkeypatch):
    terms = traced.gpu_side_terms(1000, world_size=1, nodes=1, ratio=1.25)
    assert terms["allocator_reserve"] == 250
    monkeypatch.setenv("FMEST_ALLOCATOR_RESERVE_FRACTION", "0.5")
    assert traced.gpu_side_terms(1000, world_size=1, nodes=1,
                                 ratio=1.25)["allocator_reserve"] == 500


def test_fake_trace_replays_the_events_once(monkeypatch):
    """Issue 21: one replay per trace (the expandable-segments replay was a note only)."""
    from fmest_torch_runner import tracker as tracker_mod

    calls = []
    orig = tracker_mod.replay_allocator
    monkeypatch.setattr(tracker_mod, "replay_allocator",
                        lambda tr, config=None: calls.append(config) or orig(tr, config))
    res = run(RunSpec(hf_config=TINY, seq_len=64, micro_batch_size=1), "fake", round_bytes=512)
    assert res.status == "ok", res.error
    assert calls == [None]


def test_tracker_fast_path_sees_nested_outputs():
    """Op outputs that are tuples/lists (nested) are tracked like the pytree walk did."""
    from fmest_torch_runner.tracker import _flat_tensors

    a, b, c = torch.empty(2), torch.empty(3), torch.empty(4)
    assert [t.numel() for t in _flat_tensors((a, [b, (c, None)], 5))] == [2, 3, 4]
    tr = StorageTracker()
    with tr:
        x = torch.empty(100)
        parts = torch.split(torch.empty(64), 16)  # a tuple of views of one storage
        outs = torch._foreach_add([torch.empty(8), torch.empty(8)], 1.0)  # a list output
    sizes = sorted(e[2] for e in tr.events if e[0] == "m")
    assert sizes == sorted([400, 256, 32, 32, 32, 32])
    del x, parts, outs
