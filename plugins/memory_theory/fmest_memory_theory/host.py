"""Host (CPU RAM) memory per node: model loading, offloaded optimizer state and parameters.

Offloaded runs fail on the host as often as on the GPU. The formulas follow DeepSpeed's own
memory estimators (``deepspeed/runtime/zero/stage_1_and_2.py``
``estimate_zero2_model_states_mem_needs`` and ``deepspeed/runtime/zero/stage3.py``
``estimate_zero3_model_states_mem_needs``, documented at
https://deepspeed.readthedocs.io/en/latest/memory.html):

- optimizer offload keeps fp32 parameters, fp32 gradients and the two Adam moments on the host:
  16 bytes per trainable parameter for the whole model, spread over the nodes;
- parameter offload (ZeRO-3 ``offload_param``) adds the 16-bit parameters: 18 bytes;
- without offload the host holds the model while it is loaded: every rank of the node loads a
  full copy (``4 x params x gpus_per_node`` in DeepSpeed's fp32 estimate; fmest uses the
  checkpoint's storage bytes), unless the model is materialized sharded (ZeRO-3 ``zero.Init``,
  FSDP ``cpu_ram_efficient_loading``), when only the largest layer per rank is;
- how the model reaches the GPU is the training stack's ``host_model_copy``
  (core/fmest/data/stacks.toml, with a source per stack): ``per_process_full`` is the rule
  above; ``one_per_node`` holds one full copy per node (rank 0 materialises, the others start
  on meta and receive a broadcast); ``per_rank_shard`` (Megatron builds each rank's
  tensor/pipeline shard on the GPU and reads only that shard of a checkpoint) and
  ``meta_init`` (torchtitan: meta device, materialised on the GPU, DCP reads the local shard)
  stage at most each rank's own shard of the parameters on the host, and no more than about
  the largest layer at a time (torch.distributed.checkpoint ``FileSystemReader.read_data``
  reads tensor by tensor and copies into the GPU tensors in place);
- every term times DeepSpeed's ``additional_buffer_factor`` of 1.5 (pinned staging buffers,
  allocator slack).

The per-process resident memory of Python, PyTorch and the CUDA libraries is not included.
"""

from __future__ import annotations

from attrs import frozen

#: DeepSpeed's ``additional_buffer_factor`` default in both estimators.
HOST_BUFFER_FACTOR = 1.5
#: fp32 params + fp32 grads + Adam m + v on the host (ZeRO-Offload, Ren et al. 2021,
#: arXiv:2101.06840, section 4.1; DeepSpeed estimators' 16).
OFFLOADED_OPTIMIZER_BYTES_PER_PARAM = 16
#: ... plus the 16-bit parameters when they are offloaded too (DeepSpeed's 18).
OFFLOADED_PARAMS_EXTRA_BYTES_PER_PARAM = 2


@frozen(kw_only=True)
class HostMemory:
    """Bytes of host RAM one node needs at its peak, by component."""

    model_loading_bytes: float
    offloaded_optimizer_bytes: float
    offloaded_params_bytes: float

    @property
    def total_bytes(self) -> float:
        # loading happens before training state exists; the peak is the larger phase
        return max(self.model_loading_bytes,
                   self.offloaded_optimizer_bytes + self.offloaded_params_bytes)

    def components(self) -> dict[str, int]:
        return {"host_model_loading": int(self.model_loading_bytes),
                "host_offloaded_optimizer": int(self.offloaded_optimizer_bytes),
                "host_offloaded_params": int(self.offloaded_params_bytes)}


def host_memory_per_node(*, total_params: float, trainable_params: float,
                         largest_layer_params: float, gpus_per_node: int, nodes: int,
                         cpu_offload: str, sharded_init: bool,
                         load_bytes_per_param: float,
                         host_model_copy: str = "per_process_full",
                         rank_shard_divisor: float = 1.0) -> HostMemory:
    """Host RAM per node (see the module doc). ``cpu_offload`` is ``none``, ``optimizer`` or
    ``params`` (params and optimizer); ``sharded_init`` means the model is materialized
    sharded (ZeRO-3 zero.Init / FSDP cpu_ram_efficient_loading); ``host_model_copy`` is the
    stack's loading behaviour and ``rank_shard_divisor`` the number of ranks one copy of the
    parameters is split over (tp x pp x parameter sharding) for the shard-wise ones."""
    per_node_share = 1.0 / nodes
    if host_model_copy in ("per_rank_shard", "meta_init"):
        staged = min(total_params / rank_shard_divisor, largest_layer_params)
        loading = staged * load_bytes_per_param * gpus_per_node
    elif sharded_init:
        loading = largest_layer_params * load_bytes_per_param * gpus_per_node
    else:
        copies = 1 if host_model_copy == "one_per_node" else gpus_per_node
        loading = total_params * load_bytes_per_param * copies
    optimizer = params = 0.0
    if cpu_offload in ("optimizer", "params"):
        optimizer = trainable_params * OFFLOADED_OPTIMIZER_BYTES_PER_PARAM * per_node_share
    if cpu_offload == "params":
        params = total_params * OFFLOADED_PARAMS_EXTRA_BYTES_PER_PARAM * per_node_share
    return HostMemory(model_loading_bytes=loading * HOST_BUFFER_FACTOR,
                      offloaded_optimizer_bytes=optimizer * HOST_BUFFER_FACTOR,
                      offloaded_params_bytes=params * HOST_BUFFER_FACTOR)
