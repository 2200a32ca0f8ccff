"""The seed-compatible calibration knobs (fmest.physics.calibration)."""

from __future__ import annotations

import pytest

from fmest.errors import InputError
from fmest.estimates import MemoryEstimate, Provenance
from fmest.physics.calibration import GIB, calibrate_memory, usable_bytes


def _estimate():
    comps = {"weights": 10 * GIB, "activations": 4 * GIB}
    return MemoryEstimate(total_bytes=14 * GIB, components=comps, phase="backward",
                          provenance=Provenance(basis="analytic", detail="theory"),
                          phase_peaks_bytes={"backward": 14 * GIB, "optimizer": 11 * GIB})


def test_knobs_change_breakdown_total_and_provenance():
    est = calibrate_memory(_estimate(), activation_factor=1.5, fragmentation_gib=2,
                           misc_overhead_gib=0.5)
    assert est.components["activations"] == 6 * GIB
    assert est.components["fragmentation"] == 2 * GIB
    assert est.components["misc_overhead"] == GIB // 2
    assert est.total_bytes == sum(est.components.values()) == int(18.5 * GIB)
    assert est.phase_peaks_bytes["backward"] == est.total_bytes
    # the optimizer phase holds no activations: only the added GiB move it
    assert est.phase_peaks_bytes["optimizer"] == 11 * GIB + 2 * GIB + GIB // 2
    small = calibrate_memory(_estimate(), activation_factor=0.5)
    assert small.phase_peaks_bytes["optimizer"] == 11 * GIB   # never below zero, never shifted
    assert "activations x 1.5" in est.provenance.detail and "theory" in est.provenance.detail


def test_defaults_change_nothing_and_margin():
    base = _estimate()
    assert calibrate_memory(base) is base
    assert usable_bytes(80 * GIB, 0.1) == pytest.approx(72 * GIB)
    with pytest.raises(InputError):
        usable_bytes(80 * GIB, 1.2)
    with pytest.raises(InputError):
        calibrate_memory(base, activation_factor=0)
