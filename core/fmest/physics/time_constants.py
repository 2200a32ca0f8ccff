"""Constants of the step-time physics shared by the ``time_roofline`` plugin
(``fmest_time_roofline.formulas``, which re-exports them) and the planner's array formulas
(:mod:`fmest.plan.vector`). Each is defined once, here, so the two cannot drift.

Every constant is either taken from evidence in ``docs/research/hardware_notes.md`` (HN §n) or
marked ``calibrated`` (fitted once, globally, against the throughput rows of
``measured_dev.csv`` by ``benchmarks/accuracy_time.py``; never per row). The derivations are in
``docs/time_model.md``. Constants only one of the two uses stay with it.
"""

from __future__ import annotations

from fmest.physics.gpu_prefix import value_by_gpu_prefix

# ---------------------------------------------------------------------------------------------
# Memory-bound work
# ---------------------------------------------------------------------------------------------

#: Achievable fraction of peak HBM bandwidth for streaming kernels (HN §4: STREAM triad on
#: A100 83 %, H100 89 %, H200 86 %).
HBM_EFFICIENCY = 0.85

#: torch.compile (Inductor) fuses chains of elementwise ops into one kernel, so norms,
#: activations, residual adds and RoPE read and write HBM once instead of once per op.
#: Evidence: torchtune 3B single A100 +27 % tokens/s, torchtitan Llama-3.1-8B on 8/128 H100
#: +16 %/+16 % (measured_dev.csv rows tt32-3b-compile, titan24-8b-*-r2). Calibrated (global):
#: the memory-bound time is divided by this factor under ``--compile``.
COMPILE_MEMORY_BOUND_SPEEDUP = 2.5

# ---------------------------------------------------------------------------------------------
# Collectives
# ---------------------------------------------------------------------------------------------

#: Achieved ring bus bandwidth as a fraction of the unidirectional link speed (HN §5):
#: within a node 0.77-0.78 on 8xA100 (NVLink3), 0.82 ring on 8xH200; across nodes 0.70-0.75 of
#: the per-GPU NIC.
INTRA_NODE_COLLECTIVE_EFFICIENCY = 0.78
#: NVLink4 (Hopper) ring collectives reach a higher fraction: 8xH200 ring all-reduce
#: (``NCCL_NVLS_ENABLE=0``) 367.6 GB/s busbw of 450 GB/s = 0.82; H100 NVLink P2P 376 of 450 =
#: 0.83 (HN §5). Hopper parts share the NVLink4/NVSwitch fabric, so they use this value; NVLS
#: (in-switch all-reduce, >100 %) is not assumed because TP/FSDP use all-gather/reduce-scatter.
#: Keyed by a prefix of ``GpuSpec.name`` (:func:`intra_node_collective_efficiency`).
INTRA_NODE_COLLECTIVE_EFFICIENCY_BY_GPU = {"H100-SXM": 0.82, "H800": 0.82, "H200": 0.82,
                                           "GH200": 0.82}
INTER_NODE_COLLECTIVE_EFFICIENCY = 0.72
#: Per-step latency of a collective algorithm step (NCCL: a few microseconds per hop within a
#: node, ~10 us across nodes; HN §5 "latency term for small messages").
INTRA_NODE_LATENCY_S = 5e-6
INTER_NODE_LATENCY_S = 10e-6
#: Fallback NIC bandwidth per GPU when the GPU table has none: 200 Gb/s (HN §7, GCP A3 Mega).
DEFAULT_INTER_NODE_BYTES_PER_S = 25e9
#: Overlapped communication is not free: NCCL kernels occupy SMs and HBM bandwidth while
#: compute runs, slowing it (Chang et al. 2024, FLUX, arXiv:2406.06858 §2; Pati et al. 2024,
#: T3, arXiv:2401.16677 §3: 10-30 % slowdown of concurrent GEMMs). This fraction of every hidden
#: second of communication is added to the step. Calibrated (global) within that range.
OVERLAP_INTERFERENCE_FRACTION = 0.2


def intra_node_collective_efficiency(gpu_name: str) -> float:
    """Achieved ring busbw / unidirectional link speed within a node (HN §5):
    ``INTRA_NODE_COLLECTIVE_EFFICIENCY_BY_GPU`` for NVLink4 parts, else
    ``INTRA_NODE_COLLECTIVE_EFFICIENCY``."""
    return value_by_gpu_prefix(INTRA_NODE_COLLECTIVE_EFFICIENCY_BY_GPU, gpu_name,
                               INTRA_NODE_COLLECTIVE_EFFICIENCY)


# ---------------------------------------------------------------------------------------------
# Host link and host optimizer (offload)
# ---------------------------------------------------------------------------------------------

#: Achievable fraction of a PCIe link (HN §5: EFA/p2p measurements reach 83-97 % of spec;
#: pinned host copies reach ~80 % of PCIe spec in practice).
PCIE_EFFICIENCY = 0.80
#: Fallback host link: PCIe Gen4 x16, 32 GB/s per direction (PCI-SIG).
DEFAULT_PCIE_BYTES_PER_S = 32e9

#: CPU optimizer throughput for ZeRO-Offload: DeepSpeed CPU-Adam updates ~1e9 parameters/s
#: per node-socket group (Ren et al. 2021, ZeRO-Offload, arXiv:2101.06840, §6: CPU-Adam 1B
#: params in ~1 s on a 2-socket host). Shared by the GPUs of a node.
CPU_ADAM_PARAMS_PER_S_PER_NODE = 1.0e9
