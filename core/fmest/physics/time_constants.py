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

#: HBM bytes that huggingface/peft's ``lora.Linear.forward`` adds around each adapted linear,
#: per token, per input feature (``in``) and per output feature (``out``) of the linear, for
#: the forward and the backward (the adapters' own GEMMs are priced by the GEMM roofline).
#: The code (src/peft/tuners/lora/layer.py, huggingface/peft v0.13.2
#: 431c0e2d5ca56fa512dc4c96876c4145bb538f62; the same cast as ``self._cast_input_dtype(x,
#: lora_A.weight.dtype)`` at 5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40 and in peft 0.21.2):
#: ``x = x.to(lora_A.weight.dtype)`` (the adapters are fp32:
#: ``get_peft_model(autocast_adapter_dtype=True)``), ``result + lora_B(lora_A(dropout(x))) *
#: scaling``. Traced with a TorchDispatchMode byte count (benchmarks/count_elementwise_bytes.py's
#: counter; peft 0.21.2, torch 2.13 CPU, bf16 base, r=16, under bf16 autocast as HF Trainer's
#: ``bf16=True`` runs it; reproduced by tests/test_hf_trainer_time.py): forward ``in``: the
#: cast to fp32 (r2 w4) + autocast's cast back to bf16 for lora_A (r4 w2) = 12; ``out``:
#: ``* scaling`` (r2 w2) + the add (r2 r2 w2) = 10. Backward ``in``: the gradient cast up
#: (r2 w4) and down (r4 w2) and its add into the base layer's input gradient (r2 r2 w2) = 18;
#: ``out``: the ``* scaling`` gradient (r2 w2) = 4.
PEFT_LORA_BYTES_PER_FEATURE = {"fwd_in": 12.0, "fwd_out": 10.0, "bwd_in": 18.0, "bwd_out": 4.0}
#: The same layer without autocast (``pure`` precision: a bf16 base, PEFT's fp32 adapters, no
#: ``torch.autocast``: an own loop, fmest's GPU probe). Same trace without the autocast context
#: (peft 0.21.2, torch 2.13 CPU; tests/test_hf_trainer_time.py reruns it): forward ``in``: the
#: cast to fp32 (r2 w4) = 6, lora_A reads that fp32 copy itself; ``out``: lora_B's output stays
#: fp32, so ``* scaling`` (r4 w4), the add of the bf16 base output to it, promoted to fp32
#: (r2 r4 w4) and ``result.to(bf16)`` (r4 w2) = 24. Backward ``out``: the cast's gradient up
#: (r2 w4), the add's gradient down to the base branch (r4 w2) and the ``* scaling`` gradient
#: (r4 w4) = 20; ``in``: the fp32 input gradient cast down (r4 w2) and added into the base
#: layer's (r2 r2 w2) = 12.
PEFT_LORA_BYTES_PER_FEATURE_NO_AUTOCAST = {"fwd_in": 6.0, "fwd_out": 24.0, "bwd_in": 12.0,
                                          "bwd_out": 20.0}
#: The same layer with adapters in the compute dtype (``training.lora_adapter_dtype =
#: "compute"``: PEFT before 0.12 on a bf16 base, ``autocast_adapter_dtype=False``, adapters cast
#: down): the cast is a no-op, so forward ``in`` 0, ``out`` ``* scaling`` (r2 w2) + the add (r2 r2
#: w2) = 10; backward ``in`` the add into the base layer's input gradient (r2 r2 w2) = 6, ``out``
#: the ``* scaling`` gradient (r2 w2) = 4. Same trace, ``get_peft_model(...,
#: autocast_adapter_dtype=False)`` on a bf16 linear (tests/test_hf_trainer_time.py).
PEFT_LORA_BYTES_PER_FEATURE_COMPUTE_DTYPE = {"fwd_in": 0.0, "fwd_out": 10.0, "bwd_in": 6.0,
                                            "bwd_out": 4.0}
#: With ``lora_dropout`` > 0 PEFT's ``nn.Dropout`` runs on the fp32 copy: on CUDA one fused
#: ``native_dropout`` kernel (read fp32 4, write fp32 4 + bool mask 1 = 9 per element;
#: aten/src/ATen/native/cuda/Dropout.cu ``fused_dropout``) and ``native_dropout_backward``
#: (read grad 4 + mask 1, write 4 = 9). The CPU trace decomposes it (bernoulli_, div_, mul);
#: these are the CUDA kernels' bytes. Per input feature per token, forward and backward.
PEFT_LORA_DROPOUT_BYTES_PER_IN_FEATURE = {"fwd": 9.0, "bwd": 9.0}

#: HBM bytes of fms-acceleration's fused LoRA (fused-ops-and-kernels ``fused_lora``, Unsloth's
#: ``LoRA_QKV`` / ``LoRA_W`` autograd functions on a quantized base; a stack or job that fuses
#: ``lora``), per token, per input / output feature of an adapted linear, beyond its GEMMs
#: (foundation-model-stack/fms-acceleration 876e2ed6fc4e966785e3f4315f5ee3cdf8e3d097
#: plugins/fused-ops-and-kernels/src/fms_acceleration_foak/fused_ops/unsloth_lora/utils.py
#: ``matmul_lora``, bnb/fast_lora.py): the adapters run in the input's dtype (``A.to(dtype)``,
#: no fp32 copy of the input); forward ``out += (X @ A) @ (s * B)``: one in-place add (read 2
#: + 2, write 2 = 6 per output feature); backward ``dX += (X_dropped != 0) * (dQ @ B.t() @ (s *
#: A.t()))``: the compare (read 2, write a 1-byte mask), the multiply (read 1 + 2, write 2)
#: and the in-place add (6) = 14 per input feature.
FUSED_LORA_BYTES_PER_FEATURE = {"fwd_in": 0.0, "fwd_out": 6.0, "bwd_in": 14.0, "bwd_out": 0.0}
#: Its dropout: PEFT's ``nn.Dropout`` on the compute-dtype input (``matmul_lora``: ``X =
#: dropout(X)``): CUDA ``native_dropout`` read 2, write 2 + bool mask 1 = 5 per input feature;
#: no autograd backward of its own (the mask is the ``!= 0`` compare above).
FUSED_LORA_DROPOUT_BYTES_PER_IN_FEATURE = {"fwd": 5.0, "bwd": 0.0}

# PEFT's k-bit preparation of a bitsandbytes 4-bit base (``training.kbit_prep`` peft /
# peft_bf16_head: ``prepare_model_for_kbit_training`` makes every non-``Params4bit`` parameter
# fp32, huggingface/peft 5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40 src/peft/utils/other.py)
# runs the residual stream in fp32 (memory_theory ``_stream_bytes``): the fp32 norm weights
# make fp32 norm outputs and bitsandbytes ``Linear4bit.forward`` returns its input's dtype.
# Per element, (forward, backward) HBM bytes, eager kernels (time_roofline
# ``formulas.kbit_fp32_stream_bytes_per_token``; docs/time_model.md §2):
#: bitsandbytes ``Linear4bit.forward``: ``x = x.to(self.compute_dtype)`` and ``bnb.matmul_4bit(
#: ...).to(inp_dtype)`` (bitsandbytes-foundation/bitsandbytes
#: 005a63c2badadd7fb2c45a4b67c1dcbabb72b297 bitsandbytes/nn/modules.py; the same two casts in
#: 0.43.x): with an fp32 input each is one ``_to_copy`` kernel, fp32 -> bf16 in (read 4, write
#: 2) and bf16 -> fp32 out (read 2, write 4); the backward of each is the opposite cast of the
#: gradient (6). Per input feature and per output feature of every 4-bit linear whose input is
#: fp32; also per element of q, k and v that flash-attention casts back to the autocast dtype
#: (transformers ``_flash_attention_forward``: ``if target_dtype and q.dtype == torch.float32:
#: q, k, v = q.to(target_dtype), ...``, transformers 5.24.0
#: src/transformers/modeling_flash_attention_utils.py; SDPA and eager attention's matmuls are
#: cast by autocast, the same kernel).
KBIT_PREP_CAST_BYTES_PER_ELEMENT = {"fwd": 6.0, "bwd": 6.0}
#: The elementwise chains on fp32 and on bf16 tensors, bytes per element, forward and backward,
#: traced with benchmarks/count_elementwise_bytes.py's TorchDispatchMode counter on its own
#: family functions (torch 2.13 CPU, transformers 5.24.0 ``apply_rotary_pos_emb``; reproduced
#: by tests/test_kbit_prep_time.py); the time model adds fp32 minus bf16. ``resnorm``: the
#: residual add + ``LlamaRMSNorm`` with a frozen weight, per hidden element per norm (fp32:
#: mean of the two per layer, fp32 stream + bf16 o_proj output and fp32 stream + fp32
#: down_proj output, fp32 weight; the fp32 norm skips the up- and down-casts, so its forward
#: moves less); ``rope``: q/k (bf16 cos/sin), per q+kv element; ``activation``: SwiGLU
#: ``silu(gate) * up``, per intermediate element.
KBIT_PREP_TRACED_BYTES_PER_ELEMENT = {
    "resnorm_bf16_fwd": 42.05, "resnorm_bf16_bwd": 98.08,
    "resnorm_fp32_fwd": 39.06, "resnorm_fp32_bwd": 103.09,
    "rope_bf16_fwd": 20.8, "rope_bf16_bwd": 38.8, "rope_fp32_fwd": 40.8, "rope_fp32_bwd": 76.8,
    "activation_bf16_fwd": 10.0, "activation_bf16_bwd": 20.0,
    "activation_fp32_fwd": 20.0, "activation_fp32_bwd": 40.0}
#: Backward: the input gradients of the linears that read the same fp32 tensor (q/k/v on the
#: attention norm's output, gate/up on the MLP norm's) are summed in fp32 (read 4 + 4, write
#: 4 = 12 per element per extra consumer) instead of bf16 (6): 6 more per hidden element per
#: extra consumer (autograd sums the gradients of a tensor used more than once).
KBIT_PREP_GRAD_SUM_EXTRA_BYTES_PER_ELEMENT = 6.0
#: PEFT's ``x = x.to(lora_A.weight.dtype)`` (``PEFT_LORA_BYTES_PER_FEATURE`` ``fwd_in``) is a
#: no-op on an fp32 input: 6 bytes per input feature fewer in forward. Backward unchanged: the
#: gradient's cast down (6) is gone but its add into the base layer's fp32 input gradient
#: moves 12 instead of 6.
KBIT_PREP_LORA_FP32_INPUT_SAVED_BYTES_PER_IN_FEATURE = {"fwd": 6.0, "bwd": 0.0}

# torch.compile (Inductor) enters the time model through bytes, not a divisor: the fused
# kernels' bytes per element are fmest_time_roofline.formulas.COMPILED_FWD_BYTES_PER_ELEMENT and
# COMPILED_BWD_BYTES_PER_ELEMENT
# (traced by benchmarks/count_elementwise_bytes.py).

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
#: GPUs whose stock NVIDIA driver gives no GPU peer-to-peer (P2P) access over PCIe, so NCCL
#: stages intra-node collectives through pinned host memory (SHM transport): GeForce RTX 4090
#: (tinygrad/open-gpu-kernel-modules README @1f40371d287b0e7079e972e7468c09e0a29e2768:
#: MAILBOXP2P "is not present or disabled in hardware on the 4090s, and that's why P2P doesn't
#: work"; the patched driver maps BAR1 instead) and GeForce RTX 3090 without an NVLink bridge
#: (NVIDIA/nccl issue #1127, 2023-12-26: 8x RTX 3090 on PCIe 3.0 x16, p2pBandwidthLatencyTest
#: "Device=0 CANNOT Access Peer"; aikitoria/open-gpu-kernel-modules issue #3, 2025-09-01: the
#: P2P-patched driver is what makes 2x RTX 3090 peers). The GPU table's rows for these cards
#: carry intra_node = their PCIe link (no NVLink). Keyed by a prefix of ``GpuSpec.name``
#: (True = no P2P); a GPU not listed is assumed to have PCIe P2P (or NVLink).
PCIE_P2P_DISABLED_BY_GPU = {"RTX3090": True, "RTX4090": True}
#: Bus bandwidth of a ring collective staged through host memory (NCCL SHM) as a fraction of
#: the same collective over PCIe P2P on the same machine: 4x RTX 4090 without a PCIe switch,
#: all-reduce busbw 18 GB/s through SHM against 22 GB/s with the P2P-patched driver and
#: ``NCCL_P2P_LEVEL=SYS`` (NVIDIA/nccl issue #1603, 2025-02-12; an NCCL maintainer there: "we
#: normally disable P2P and bounce the communication via Host (SHM) buffers instead"):
#: 18 / 22 = 0.818. Applied on top of ``INTRA_NODE_COLLECTIVE_EFFICIENCY`` (which the patched
#: 6x RTX 4090 tinybox reaches: all_reduce busbw 24.5 of 32 GB/s = 0.77, tinygrad README above).
HOST_STAGED_TO_P2P_BUSBW_RATIO = 0.818
#: Latency of one collective algorithm step: NCCL's own cost model, the per-step hardware
#: latency of the Simple protocol (the one large training collectives run), ring algorithm:
#: NVLink 3.4 us, network 14 us (``hwLatencies`` of NVIDIA/nccl src/graph/tuning.cc, commit
#: 5067397c2676d5aed50042fc39e5c8ee96eb0027, 2026-06-11; NCCL adds a base latency of 8.4 us
#: per operation that this model leaves out).
INTRA_NODE_LATENCY_S = 3.4e-6
INTER_NODE_LATENCY_S = 14e-6
#: Fallback NIC bandwidth per GPU when the GPU table has none: 200 Gb/s (HN §7, GCP A3 Mega).
DEFAULT_INTER_NODE_BYTES_PER_S = 25e9
#: Overlapped communication is not free: NCCL kernels occupy SMs and HBM bandwidth while
#: compute runs, slowing it. Measured: "overlapping computation and communication can result
#: in an average computational slowdown of 18.9 %, with a maximum of 40.0 %" over GPT and
#: LLaMA training on 4 A100, H100, MI250, MI210 (Lee et al. 2025, "Characterizing
#: Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning",
#: arXiv:2507.03114, abstract). This fraction of every hidden second of communication (the
#: compute it overlaps) is added to the step.
OVERLAP_INTERFERENCE_FRACTION = 0.189


#: GPUs of one NVLink domain where it is larger than the job's node: the GPU table's GB200
#: row is the GB200 NVL72 rack (core/fmest/data/gpus.csv: "NVLink 5 within the 72-GPU NVLink
#: domain"; NVIDIA GB200 NVL72 page https://www.nvidia.com/en-us/data-center/gb200-nvl72/: 72
#: Blackwell GPUs joined by fifth-generation NVLink switches into one NVLink domain).
#: Keyed by a prefix of ``GpuSpec.name``.
NVLINK_DOMAIN_GPUS = {"GB200": 72}


def intra_node_collective_efficiency(gpu_name: str) -> float:
    """Achieved ring busbw / unidirectional link speed within a node (HN §5):
    ``INTRA_NODE_COLLECTIVE_EFFICIENCY_BY_GPU`` for NVLink4 parts, else
    ``INTRA_NODE_COLLECTIVE_EFFICIENCY``; times ``HOST_STAGED_TO_P2P_BUSBW_RATIO`` for GPUs
    without PCIe peer-to-peer (``PCIE_P2P_DISABLED_BY_GPU``: NCCL goes through host memory).
    The time plugin (``link_bytes_per_s``) and the planner (``_intra_bw``) both read this."""
    eff = value_by_gpu_prefix(INTRA_NODE_COLLECTIVE_EFFICIENCY_BY_GPU, gpu_name,
                              INTRA_NODE_COLLECTIVE_EFFICIENCY)
    if pcie_p2p_disabled(gpu_name):
        eff *= HOST_STAGED_TO_P2P_BUSBW_RATIO
    return eff


def pcie_p2p_disabled(gpu_name: str) -> bool:
    """Whether the GPU's stock driver gives no PCIe peer-to-peer (``PCIE_P2P_DISABLED_BY_GPU``),
    so intra-node collectives are staged through host memory (NCCL SHM transport)."""
    return bool(value_by_gpu_prefix(PCIE_P2P_DISABLED_BY_GPU, gpu_name, False))


# ---------------------------------------------------------------------------------------------
# Host link and host optimizer (offload)
# ---------------------------------------------------------------------------------------------

#: Achievable fraction of a PCIe x16 link for pinned host<->device copies, measured with
#: NVIDIA nvbandwidth: A100-SXM4-40GB (Gen4, 32 GB/s) host_to_device_memcpy_sm 25.13 GB/s =
#: 0.785 (NVIDIA/nvbandwidth issue #42, 2025-07-05); H100 (Gen5, 64 GB/s)
#: device_to_host_memcpy_sm 52.77 GB/s = 0.825 (NVIDIA/nvbandwidth issue #24, 2024-09-11; its
#: host-to-device 35.2 GB/s is the anomaly that issue reports). Mean of the two, 0.805 -> 0.80.
PCIE_EFFICIENCY = 0.80
#: Fallback host link: PCIe Gen4 x16, 32 GB/s per direction (PCI-SIG).
DEFAULT_PCIE_BYTES_PER_S = 32e9

#: CPU optimizer throughput for ZeRO-Offload: DeepSpeed CPU-Adam updates ~1e9 parameters/s
#: per node-socket group (Ren et al. 2021, ZeRO-Offload, arXiv:2101.06840, §6: CPU-Adam 1B
#: params in ~1 s on a 2-socket host). Shared by the GPUs of a node.
CPU_ADAM_PARAMS_PER_S_PER_NODE = 1.0e9


# ---------------------------------------------------------------------------------------------
# Host dispatch (shared by time_roofline ``host_dispatch_seconds`` and the planner's mirror)
# ---------------------------------------------------------------------------------------------

#: Host (CPU) time per dispatched ATen op of eager PyTorch: Python, pybind11, the autograd
#: and ATen dispatchers, allocator and cudaLaunchKernel, "~5-25 us of CPU-side work per op"
#: before its kernel runs (J. Huang Lin, "From PyTorch op to kernel launch", table of dispatch
#: layers; H. He 2022, "Making Deep Learning Go Brrrr From First Principles", the overhead
#: regime: "overhead: everything else"). Taken at 10 us, inside that range. Kernels run
#: asynchronously, so host time only shows when it exceeds the GPU's: the step is the larger of
#: the two (``host_dispatch_seconds``). Check, not fit: the Qwen README's 256-token LoRA rows
#: (A100, 1.8B/7B/14B) imply 9.6-10.7 us per op with the counts below.
HOST_SECONDS_PER_EAGER_OP = 10e-6
#: Host seconds per dispatched ATen op of eager transformers code, by pass, measured on GPU
#: hosts: ``benchmarks/gpu/host_overhead.py`` on fmest's lent H200 and H100 machines, 2026-11-27
#: (Intel Xeon, 16 cores, Firecracker VMs, torch 2.11.0+cu130, transformers 5.17.0, peft 0.21.0).
#: A LlamaForCausalLM at seq 16 and hidden 64 (host-bound: the GPU wait after backward stayed
#: under 0.17 ms), on the H100 also at hidden 2048 (real tensor sizes, short kernels), at 2 and
#: 6 (H200) or 2 and 10 (H100) layers, median of 40 steps; per pass (time difference) / (traced
#: op difference). The mean over the 14 mode-runs (full, PEFT LoRA q/k/v/o; no / full
#: checkpointing; H200 2 runs of 4 modes, H100 4 modes at hidden 64 and 2 at 2048): forward
#: 21.7 us (runs 9.9-36.1, sd 9.3), backward 13.8 us (8.2-30.1, sd 5.7)
#: (benchmarks/gpu/results/H200-SXM-141GB-2026-11-27/host_overhead/,
#: benchmarks/gpu/results/H100-SXM-80GB-2026-11-27/host_overhead/; the H200 runs alone: 19.5 and
#: 10.3 us). The spread is the hosts' own (the same mode differs up to 2x between runs), which
#: the time interval of a host-bound answer carries. The forward's ops run
#: under the modules' Python (``nn.Module.__call__``, transformers' attention dispatch, PEFT's
#: adapter loop); the backward's come from the autograd engine's C++ (and, under checkpointing,
#: the recompute). They price the eager transformers layer (formulas.host_dispatch_seconds);
#: ``HOST_SECONDS_PER_EAGER_OP`` stays the unit of the Megatron-Core and ZeRO-3 op counts.
HOST_SECONDS_PER_FORWARD_OP = 21.7e-6
HOST_SECONDS_PER_BACKWARD_OP = 13.8e-6
#: Host time per op on a GPU whose host CPU is NVIDIA Grace (Arm Neoverse V2), relative to the
#: x86 hosts ``HOST_SECONDS_PER_EAGER_OP`` stands for: the same ``torch.nn.Linear`` forward (BF16,
#: hidden 2048, 8192 tokens) took 37.08 us of CPU time per call on GB200 and 33.17 us on GH200
#: against 13.48 us on an H100 DGX (Intel Xeon Platinum 8480C) (NVIDIA/TransformerEngine issue
#: #2053, "[PyTorch] High CPU overhead on Grace systems", 2025-08-11, table of CPU runtime per
#: Linear forward; TE's own Linear: 99.66 us GB200, 90.53 us GH200): 37.08 / 13.48 = 2.75 and
#: 33.17 / 13.48 = 2.46. Keyed by a prefix of ``GpuSpec.name`` (:func:`host_seconds_per_op`).
HOST_OP_TIME_FACTOR_BY_GPU = {"GB200": 37.08 / 13.48, "GH200": 33.17 / 13.48}


def host_seconds_per_op(gpu_name: str) -> float:
    """Host seconds per dispatched op on ``gpu_name``'s host: ``HOST_SECONDS_PER_EAGER_OP``,
    times ``HOST_OP_TIME_FACTOR_BY_GPU`` on Grace-hosted GPUs."""
    return HOST_SECONDS_PER_EAGER_OP * value_by_gpu_prefix(HOST_OP_TIME_FACTOR_BY_GPU,
                                                           gpu_name, 1.0)


#: DeepSpeed ZeRO-3's per-module host work per decoder layer and micro-batch, in eager-op
#: equivalents (x ``HOST_SECONDS_PER_EAGER_OP``). ZeRO-3 hooks every submodule: a forward
#: pre-hook fetches its parameters (``PartitionedParameterCoordinator.fetch_sub_module``:
#: trace bookkeeping, ``all_gather_coalesced`` -- ``NoGatherHandle`` at world size 1 --, the
#: in-flight wait, prefetch queue walk), a forward hook releases them (``release_sub_module``)
#: and wraps the outputs/inputs in ``PreBackwardFunction``/``PostBackwardFunction`` so backward
#: fetches and releases again; every parameter's gradient goes through a Python hook into the
#: IPG bucket (``stage3.py`` ``reduce_partition_and_remove_grads``, ``partition_grads``) each
#: micro-batch. All Python (deepspeedai/DeepSpeed @8640b8e52a93ba4e6b0da0e953c5761fc6977aa9,
#: v0.12-era, deepspeed/runtime/zero/parameter_offload.py ``_register_hooks_recursively``,
#: partitioned_param_coordinator.py, stage3.py). Traced (no evidence row enters it): DeepSpeed 0.12.3 ZeRO-3
#: (world size 1, HF "auto" thresholds: persistence 10 h, prefetch 0.9 h^2, reduce bucket h^2)
#: over the same transformers LlamaForCausalLM as ``EAGER_FORWARD/BACKWARD_OPS_PER_LAYER`` (13 hooked modules
#: per layer), full non-reentrant checkpointing, on the CPU accelerator, fwd+bwd per layer as
#: (6 layers - 2 layers) / 4, min of 80-120 steps, three runs paired with the plain model:
#: ZeRO-3 8.2 / 9.3 / 8.8 ms per layer against 2.58 / 3.06 / 3.29 ms plain (338 ops), i.e.
#: 740 / 680 / 570 extra op-equivalents, mean 660 (2026-11, transformers 5.24, torch 2.13).
#: A LoRA model (4 adapted linears, reentrant checkpointing) measured the same ZeRO-3 layer
#: time within the noise, so no per-adapter term is added. Without recompute the forward hooks
#: run once instead of twice (2 of 3 fetch/release pairs): 440, derived, not measured.
ZERO3_HOOK_OPS_PER_LAYER = {"none": 440.0, "selective": 440.0, "full": 660.0}

#: ATen ops Megatron-Core dispatches per MoE transformer layer and micro-batch, forward and
#: backward, the unit of ``HOST_SECONDS_PER_EAGER_OP``. Every Megatron-Core MoE token
#: dispatcher makes the host wait for the GPU once per MoE layer forward: the dropless
#: ``MoEAlltoAllTokenDispatcher`` copies ``tokens_per_expert`` / the all-to-all splits to the
#: host and synchronizes on them (``_maybe_dtoh_and_synchronize``, ``cuda_sync_point``
#: ``before_ep_alltoall`` with EP > 1; ``before_finish`` with EP = TP = 1), the all-gather
#: dispatcher calls ``.cpu()`` on them, DeepEP's ``buffer.dispatch`` has the CPU wait for the
#: GPU's receive counts ("the CPU will wait for GPU's signal to arrive", fused_a2a.py
#: ``FusedDispatch.forward``) and HybridEP sizes its buffers by a CPU sync unless an EP-rank
#: capacity factor or drop-and-pad sets them; only ``--moe-pad-expert-input-to-capacity``
#: (drop-and-pad: static capacity, ``dispatch_preprocess`` returns before any copy) has no sync.
#: The backward reuses the host copies (no sync). NVIDIA/Megatron-LM
#: @d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/core/transformer/moe/token_dispatcher.py,
#: fused_a2a.py. Traced on CPU (scripts/trace_megatron_moe_host_ops.py:
#: TorchDispatchMode over that commit's ``TransformerBlock``, local spec, RMSNorm, SwiGLU,
#: top-2 router with aux loss, alltoall dispatcher, EP 2 over gloo, the D2H copies counted one op
#: each), (4 layers - 2 layers) / 2 with one local expert (the grouped GEMM's single expert
#: pass): 137 ops forward, all between two syncs (the sync cuts each layer forward), 145
#: backward (2026-11, torch 2.13). The local spec runs the norms, RoPE, attention and SwiGLU
#: as separate ATen ops where Transformer Engine fuses them, while TE modules add their own
#: Python per call: the count is the code's op count, not a TE measurement.
MEGATRON_MOE_LAYER_HOST_OPS = {"forward": 137.0, "backward": 145.0}

#: Expert GEMMs per local expert of a Megatron-Core MoE layer and micro-batch: ``TEGroupedMLP``
#: runs ``linear_fc1`` and ``linear_fc2`` as TE ``GroupedLinear`` over ``num_local_experts``
#: GEMMs (NVIDIA/Megatron-LM @d98e8a64ddf34856e74b24714e3bedb2f5a39553
#: megatron/core/transformer/moe/experts.py ``TEGroupedMLP.__init__``), forward one GEMM per
#: expert each, backward a dgrad and a wgrad ``general_grouped_gemm`` each (TE
#: transformer_engine/pytorch/module/grouped_linear.py ``_GroupedLinear.backward``).
MOE_EXPERT_GEMMS_PER_LOCAL_EXPERT = {"forward": 2.0, "backward": 4.0}
#: Seconds per expert GEMM of TE's grouped GEMM (``general_grouped_gemm`` ->
#: ``nvte_multi_stream_cublas_gemm``: a loop over the experts' cuBLASLt calls on 4 streams,
#: NVIDIA/TransformerEngine PR #853; each call builds its matmul/layout descriptors and runs
#: ``cublasLtMatmulAlgoGetHeuristic`` before ``cublasLtMatmul``, TE
#: transformer_engine/common/gemm/cublaslt_gemm.cu ``cublas_gemm`` @0143a5e0 and
#: @5c62f7283a651b682648ee44d46831d232eef04a, no cache of either): measured
#: 0.267 ms for 8 experts x 128 tokens, N = K = 2048 (fprop, SM100, NVFP4, "pure" kernel
#: timing without the per-call scale swizzle) against 0.069 ms for one CUTLASS grouped launch
#: of the same work (NVIDIA/TransformerEngine PR #3134, 2026-06-17, benchmarks/linear/
#: benchmark_grouped_linear.py): 0.267 ms / 8 per GEMM, whose FLOPs take ~0.1 us, i.e. the
#: per-GEMM cost of the multi-stream path. The host issues them one after another, so they
#: add to the host time of the MoE layer (``MEGATRON_MOE_LAYER_HOST_OPS``, which traced one
#: local expert): ``formulas.moe_sync_exposed_seconds`` charges each further local expert.
TE_GROUPED_GEMM_SECONDS_PER_GEMM = 0.267e-3 / 8


# ---------------------------------------------------------------------------------------------
# DeepSpeed runtime (read from its code; time_roofline ``estimator.deepspeed_*`` and the
# planner's mirror, fmest.plan.vector)
# ---------------------------------------------------------------------------------------------

#: Blocking point-to-point transfers on a middle stage's stream per micro-batch in DeepSpeed's
#: ``PipelineEngine``. ``TrainSchedule.steps`` pairs them per step: a forward step runs
#: ``RecvActivation`` + ``SendGrad`` (to/from the previous stage), a backward step
#: ``SendActivation`` + ``RecvGrad`` (to/from the next stage), each before the step's
#: compute; ``p2p.send``/``p2p.recv`` are ``torch.distributed.send``/``recv`` (not
#: ``isend``: ``async_op=False`` is asserted) on the compute stream, so none overlaps compute
#: (deepspeedai/DeepSpeed @56c522386878df2513ccb548de76b50191ae3af7, "bf16+pipeline
#: parallelism (#1801)", 2022-04-19, the branch BigScience's BLOOM runs used:
#: deepspeed/runtime/pipe/schedule.py ``TrainSchedule.steps``, deepspeed/runtime/pipe/p2p.py
#: ``send``/``recv``, deepspeed/runtime/pipe/engine.py ``_exec_send_activations`` ...
#: ``_exec_recv_grads``). The first and last stages run 2 (one neighbour).
DEEPSPEED_PIPE_BLOCKING_TRANSFERS = {"middle": 4, "end": 2}
#: With tensor parallelism the engine sends each stage output partitioned over the TP group
#: (``is_pipe_partitioned = is_grad_partitioned = is_model_parallel``; ``PartitionedTensor``:
#: 1/tp of the activation per rank plus a small meta tensor) and rebuilds it with an
#: all-gather over the TP group (``PartitionedTensor.full``: ``dist.all_gather`` into a
#: zeroed flat buffer) three times per micro-batch: the received input in
#: ``_exec_forward_pass``, the stage output and the received gradient in
#: ``_exec_backward_pass`` (same commit, deepspeed/runtime/pipe/engine.py,
#: deepspeed/runtime/utils.py ``PartitionedTensor``).
DEEPSPEED_PIPE_PARTITION_GATHERS = 3


# ---------------------------------------------------------------------------------------------
# The norm family's elementwise bytes (issue 20; fmest_time_roofline.formulas, the planner)
# ---------------------------------------------------------------------------------------------
#: The norm family under torch.autocast (fp32 master weights, HF Trainer ``bf16=True``): the
#: residual stream is fp32 (the fp32 embedding and fp32 norm outputs feed it), the add reads the
#: fp32 stream and the bf16 branch, ``layer_norm`` runs in fp32 (autocast's fp32 list) and the
#: next Linear casts its fp32 output to bf16; RMSNorm upcasts anyway. Residual add + norm +
#: that cast, forward / backward bytes per hidden element, traced by ``python
#: benchmarks/count_elementwise_bytes.py`` (``resnorm_amp``, ``reslayernorm_amp``: TorchDispatchMode
#: byte count under ``torch.autocast("cpu", torch.bfloat16)``, torch 2.13, 2026-11-27):
#: LayerNorm 24.05 / 42.08, RMSNorm 44.06 / 126.10.
#: The norm's share is the family less the bf16 residual add's 6 / 15.12 (its eager figures).
AUTOCAST_NORM_FAMILY_BYTES = {"layer_norm": (24.05, 42.08), "rms_norm": (44.06, 126.10)}
#: The same families without autocast (bf16 stream), forward / backward bytes per hidden
#: element, same script (``resnorm``, ``reslayernorm``): RMSNorm (transformers ``LlamaRMSNorm``) 42.05 / 106.09, LayerNorm
#: 10.02 / 16.04 (time_roofline's ``NORM_BYTES_PER_ELEMENT`` / ``LAYER_NORM_BYTES_PER_ELEMENT``
#: plus the residual add, at their backward factors): what the planner's one-GPU probes price.
PURE_NORM_FAMILY_BYTES = {"layer_norm": (10.02, 16.04), "rms_norm": (42.05, 106.09)}
