"""``hardware.inter_node_gbps`` (``--inter-node-gbps``): the cluster's network between nodes,
Gb/s per GPU, replaces the GPU table's typical fabric in the engine's context, the time model and
the planner (tests/test_plan_vector.py checks the planner on a 25 Gb/s case)."""

from __future__ import annotations

import json

import pytest

from fmest import to_job
from fmest.cli import main
from fmest.convert import job_from_dict, job_to_dict
from fmest.errors import InputError
from fmest.testing import new_engine

JOB = {"model": "meta-llama/Llama-2-7b-hf", "parallelism": {"zero_stage": 3},
       "hardware": {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 4}}


@pytest.fixture(scope="module")
def engine():
    return new_engine(entrypoints=True)


def _with(gbps):
    return to_job({**JOB, "hardware": {**JOB["hardware"], "inter_node_gbps": gbps}})


def test_the_context_carries_the_stated_network(engine):
    table = engine.context(to_job(JOB)).gpu
    stated = engine.context(_with(100)).gpu
    assert stated.name == table.name
    assert stated.inter_node_bytes_per_s == 100e9 / 8     # Gb/s per GPU -> bytes/s
    assert table.inter_node_bytes_per_s != stated.inter_node_bytes_per_s


def test_a_slower_network_slows_only_the_inter_node_collectives(engine):
    fast = engine.estimate(_with(400)).time
    slow = engine.estimate(_with(25)).time
    assert slow.step_seconds > fast.step_seconds
    assert slow.breakdown["communication_dp"] > 8 * fast.breakdown["communication_dp"]
    for part in ("compute", "memory_bound"):
        if part in fast.breakdown:
            assert slow.breakdown[part] == pytest.approx(fast.breakdown[part])
    # within one node the network is never used
    one = {**JOB, "hardware": {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 1}}
    a = engine.estimate(to_job(one)).time.step_seconds
    b = engine.estimate(to_job({**one, "hardware": {**one["hardware"],
                                                     "inter_node_gbps": 1}})).time.step_seconds
    assert a == pytest.approx(b)


@pytest.mark.parametrize("bad", [0, -1, float("inf"), True])
def test_a_bad_figure_names_the_field(bad):
    with pytest.raises(InputError) as exc:
        _with(bad)
    assert "inter_node_gbps" in exc.value.field


def test_above_the_bound_is_a_unit_slip(engine):
    with pytest.raises(InputError) as exc:
        engine.context(_with(1e6))
    assert exc.value.field == "hardware.inter_node_gbps"


def test_flag_json_round_trip_and_table_line(capsys):
    argv = ["estimate", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "H100-SXM",
            "--gpus-per-node", "8", "--nodes", "2", "--zero", "3", "--inter-node-gbps", "50"]
    assert main([*argv, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["job"]["hardware"]["inter_node_gbps"] == 50
    job = job_from_dict(out["job"])
    assert job.hardware.inter_node_gbps == 50 and job_to_dict(job)["hardware"] == out["job"][
        "hardware"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "network 50 Gb/s per GPU between nodes (hardware.inter_node_gbps)" in text
