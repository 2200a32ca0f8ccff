"""The time constants the planner shares with this plugin are one set of objects, defined in
:mod:`fmest.physics.time_constants`: the plugin's formulas and the planner's array formulas
import them, so a recalibration cannot move one and leave the other behind."""

from __future__ import annotations

import pytest

import fmest.physics.time_constants as physics
from fmest.plan import vector
from fmest.testing import new_engine
from fmest_time_roofline import formulas, inference

#: Every constant of the shared module (upper-case module attributes).
SHARED = sorted(name for name in vars(physics) if name.isupper())


def test_the_shared_module_holds_the_constants_the_planner_used_to_copy():
    # the eleven values the planner once held as copies, by their canonical names
    assert {"HBM_EFFICIENCY", "INTRA_NODE_COLLECTIVE_EFFICIENCY",
            "INTRA_NODE_COLLECTIVE_EFFICIENCY_BY_GPU", "INTER_NODE_COLLECTIVE_EFFICIENCY",
            "INTRA_NODE_LATENCY_S", "INTER_NODE_LATENCY_S", "DEFAULT_INTER_NODE_BYTES_PER_S",
            "OVERLAP_INTERFERENCE_FRACTION", "PCIE_EFFICIENCY", "DEFAULT_PCIE_BYTES_PER_S",
            "CPU_ADAM_PARAMS_PER_S_PER_NODE"} <= set(SHARED)


@pytest.mark.parametrize("name", SHARED)
def test_plugin_formulas_use_the_shared_object(name):
    assert getattr(formulas, name) is getattr(physics, name)


def test_the_planner_holds_no_copy_of_a_shared_constant():
    """The planner's array formulas (vector.py) and its link rates (planner.py, which reads
    ``fmest.physics.time_constants`` as ``tc``) name the shared objects; a copy (``X = 0.85``)
    is a different object, which ``is`` tells from the import."""
    from fmest.plan import planner

    assert planner.tc is physics
    held = [name for name in SHARED if hasattr(vector, name)]
    assert len(held) >= 7
    for name in held:
        assert getattr(vector, name) is getattr(physics, name), name


def test_inference_uses_the_shared_objects():
    for name in ("HBM_EFFICIENCY", "INTRA_NODE_COLLECTIVE_EFFICIENCY", "INTRA_NODE_LATENCY_S"):
        assert getattr(inference, name) is getattr(physics, name)


def test_planner_intra_node_rate_is_the_plugins_rule_for_every_registered_gpu():
    from fmest.plan.planner import _intra_bw

    gpus = new_engine(entrypoints=True).registries.gpus.values()
    assert gpus
    for gpu in gpus:
        link = gpu.intra_node_bytes_per_s or gpu.pcie_bytes_per_s or \
            physics.DEFAULT_PCIE_BYTES_PER_S
        assert _intra_bw(gpu) == float(link) * physics.intra_node_collective_efficiency(
            gpu.name), gpu.name


def test_pure_norm_families_are_the_plugins_eager_norm_constants():
    """The planner's probe-side norm families equal the plugin's eager norm figures plus the
    residual add, at their backward factors (formulas.elementwise_bytes_fwd_bwd)."""
    res_f = formulas.RESIDUAL_BYTES_PER_ELEMENT
    res_b = res_f * formulas.ELEMENTWISE_BACKWARD_FACTOR["residual"]
    for kind, norm_f, factor in (
            ("rms_norm", formulas.NORM_BYTES_PER_ELEMENT,
             formulas.ELEMENTWISE_BACKWARD_FACTOR["norm"]),
            ("layer_norm", formulas.LAYER_NORM_BYTES_PER_ELEMENT,
             formulas.ELEMENTWISE_BACKWARD_FACTOR["layer_norm"])):
        fwd, bwd = physics.PURE_NORM_FAMILY_BYTES[kind]
        assert norm_f + res_f == pytest.approx(fwd, abs=0.1)
        assert norm_f * factor + res_b == pytest.approx(bwd, rel=0.01)
