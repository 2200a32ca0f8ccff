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
    assert {"HBM_EFFICIENCY", "COMPILE_MEMORY_BOUND_SPEEDUP", "INTRA_NODE_COLLECTIVE_EFFICIENCY",
            "INTRA_NODE_COLLECTIVE_EFFICIENCY_BY_GPU", "INTER_NODE_COLLECTIVE_EFFICIENCY",
            "INTRA_NODE_LATENCY_S", "INTER_NODE_LATENCY_S", "DEFAULT_INTER_NODE_BYTES_PER_S",
            "OVERLAP_INTERFERENCE_FRACTION", "PCIE_EFFICIENCY", "DEFAULT_PCIE_BYTES_PER_S",
            "CPU_ADAM_PARAMS_PER_S_PER_NODE"} <= set(SHARED)


@pytest.mark.parametrize("name", SHARED)
def test_plugin_formulas_use_the_shared_object(name):
    assert getattr(formulas, name) is getattr(physics, name)


@pytest.mark.parametrize("name", SHARED)
def test_planner_uses_the_shared_object(name):
    # a copy (``X = 0.85``) is a different float object: ``is`` tells it from the import
    assert getattr(vector, name) is getattr(physics, name)


def test_inference_uses_the_shared_objects():
    for name in ("HBM_EFFICIENCY", "INTRA_NODE_COLLECTIVE_EFFICIENCY", "INTRA_NODE_LATENCY_S"):
        assert getattr(inference, name) is getattr(physics, name)


def test_planner_aliases_are_bound_to_the_shared_objects():
    assert vector.DEFAULT_NIC_BYTES_PER_S is physics.DEFAULT_INTER_NODE_BYTES_PER_S
    assert vector.INTRA_NODE_EFFICIENCY is physics.INTRA_NODE_COLLECTIVE_EFFICIENCY


def test_planner_nvlink_rule_gives_the_plugins_efficiency_for_every_registered_gpu():
    # fmest.plan.planner picks INTRA_NODE_EFFICIENCY_NVLINK4 for names starting with
    # NVLINK4_PREFIXES; the plugin reads the prefix table. Both must agree on every GPU.
    names = new_engine(entrypoints=True).registries.gpus.names()
    assert names
    for name in names:
        planner = vector.INTRA_NODE_EFFICIENCY_NVLINK4 if name.startswith(
            vector.NVLINK4_PREFIXES) else vector.INTRA_NODE_EFFICIENCY
        assert planner == physics.intra_node_collective_efficiency(name), name
