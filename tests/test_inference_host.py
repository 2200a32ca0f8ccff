"""Host memory per node against DeepSpeed's own estimator formulas."""

from __future__ import annotations

import pytest

from fmest_memory_theory.host import host_memory_per_node


def test_zero3_offload_matches_deepspeed_estimator():
    # deepspeed estimate_zero3_model_states_mem_needs(total_params=13e9, largest=325e6,
    # num_gpus_per_node=8, num_nodes=1, cpu_offload=True, cpu_offload_params=True,
    # zero_init=True): cpu_mem = 13e9 * 18 * 1 * 1.5
    host = host_memory_per_node(total_params=13e9, trainable_params=13e9,
                                largest_layer_params=325e6, gpus_per_node=8, nodes=1,
                                cpu_offload="params", sharded_init=True, load_bytes_per_param=4)
    assert host.total_bytes == pytest.approx(13e9 * 18 * 1.5)
    # optimizer offload only: 16 bytes per parameter; two nodes halve each node's share
    opt = host_memory_per_node(total_params=13e9, trainable_params=13e9,
                               largest_layer_params=325e6, gpus_per_node=8, nodes=2,
                               cpu_offload="optimizer", sharded_init=True, load_bytes_per_param=4)
    assert opt.total_bytes == pytest.approx(13e9 * 16 * 0.5 * 1.5)


def test_no_offload_is_model_loading():
    # without zero.Init every rank of the node loads the model: params x 4 x gpus x 1.5
    host = host_memory_per_node(total_params=7e9, trainable_params=7e9, largest_layer_params=2e8,
                                gpus_per_node=8, nodes=1, cpu_offload="none",
                                sharded_init=False, load_bytes_per_param=4)
    assert host.total_bytes == pytest.approx(7e9 * 4 * 8 * 1.5)
    assert host.components()["host_offloaded_optimizer"] == 0
