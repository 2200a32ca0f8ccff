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


def test_the_command_replays_as_recorded_and_under_other_settings(capsys):
    import json

    from fmest.cli import main

    rc = main(["replay-snapshot", str(SNAPSHOT), "--alloc-conf", "expandable_segments:True",
               "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    first, other = out["rows"]
    assert first["as_recorded"] and first["alloc_conf"] == ""
    assert abs(first["reserved_bytes"] / first["recorded_reserved_bytes"] - 1) < 0.01
    assert other["alloc_conf"] == "expandable_segments:True"
    assert other["recorded_reserved_bytes"] is None
    assert other["reserved_bytes"] <= first["reserved_bytes"]
    assert main(["replay-snapshot", str(SNAPSHOT)]) == 0
    table = capsys.readouterr().out
    assert "(defaults) [recorded]" in table and "13.85" in table


@pytest.mark.parametrize("argv,needle", [
    (["replay-snapshot", "no-such-file.pickle"], "no such file"),
    (["replay-snapshot", __file__], "not a pickled"),
    (["replay-snapshot", str(SNAPSHOT), "--alloc-conf", "bogus:1"], "accepted: backend"),
])
def test_the_command_names_what_is_wrong(capsys, argv, needle):
    from fmest.cli import main

    assert main(argv) == 2
    assert needle in capsys.readouterr().err
