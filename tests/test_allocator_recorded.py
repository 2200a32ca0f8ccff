"""fmest.allocator against PyTorch's own allocator on a GPU: the requests of a recorded
``torch.cuda.memory._snapshot()`` (benchmarks/gpu/results/H200-SXM-141GB-2026-11-27, the
Llama-3.2-1B full fine-tuning case of benchmarks/gpu/memory_probe.py: 3 training steps, torch
2.11.0+cu130) replayed through the simulator reach the reserved peak the real allocator
reached (docs/allocator.md, "Checked against a recorded GPU trace")."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import pytest

from fmest.allocator import replay_snapshot, snapshot_events
from fmest.errors import InputError

SNAPSHOT = (Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "results"
            / "H200-SXM-141GB-2026-11-27" / "memory_snapshot_run1_H200-SXM-141GB.pickle.gz")
GIB = 1 << 30


@pytest.fixture(scope="module")
def snapshot() -> dict:
    with gzip.open(SNAPSHOT, "rb") as fh:
        return pickle.load(fh)


def test_the_recorded_reserved_peak_is_reproduced(snapshot):
    r = replay_snapshot(snapshot)
    # the probe's own reading of this case: max_memory_allocated 13.25 GiB, reserved 13.84 GiB
    assert r.recorded_reserved_peak / GIB == pytest.approx(13.846, abs=0.01)
    assert r.simulated.max_memory_allocated / GIB == pytest.approx(13.25, abs=0.02)
    assert abs(r.reserved_error) < 0.01, r
    assert r.simulated.num_ooms == 0 and r.streams == 1
    assert r.live_at_start > 0 and r.events > 10_000


def test_the_window_starts_with_the_blocks_in_use(snapshot):
    events, held_before, live = snapshot_events(snapshot)
    first = events[:live]
    assert all(ev[0] == "m" and ev[1][0] == "pre" for ev in first)
    # the weights (Llama-3.2-1B in bf16: 2.47 GB) were built before recording began
    assert sum(ev[2] for ev in first) / GIB == pytest.approx(2.37, abs=0.05)
    assert held_before >= sum(ev[2] for ev in first)


def test_settings_change_the_answer_not_the_recording(snapshot):
    default = replay_snapshot(snapshot)
    expandable = replay_snapshot(snapshot, "expandable_segments:True")
    assert expandable.recorded_reserved_peak == default.recorded_reserved_peak
    assert (expandable.simulated.max_memory_reserved
            <= default.simulated.max_memory_reserved)


def test_a_snapshot_without_history_is_refused_by_name():
    with pytest.raises(InputError, match="device_traces"):
        snapshot_events({"segments": [], "device_traces": []})
