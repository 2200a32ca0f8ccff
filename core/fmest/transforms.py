"""Transforms: named strategy objects the estimators apply in a fixed order.

1. optimizer state sizing (:class:`OptimizerSpec`), then
2. sharding over data-parallel ranks (:class:`ShardingStrategy`), then
3. communication (which collectives a strategy runs; used by time plugins).

They are registered through ``fmest_register_optimizers`` / ``fmest_register_parallelism``
so a third party can add an optimizer or a sharding scheme without touching the formulas.
"""

from __future__ import annotations

from typing import Optional

from attrs import field, frozen


@frozen(kw_only=True)
class OptimizerSpec:
    """What an optimizer keeps per trainable parameter.

    ``states`` is the number of parameter-sized state tensors (AdamW: 2, SGD with momentum: 1,
    Lion: 1). ``state_bytes_per_element`` fixes their element size (``1`` for 8-bit optimizers,
    plus ``quant_overhead_bytes_per_element`` for block-wise scales); ``None`` means the precision
    policy decides (fp32 states under amp/master, the compute dtype under pure). ``factored``
    (Adafactor) keeps row and column statistics for matrices instead of full-size second
    moments. ``step_temp_states`` is how many parameter-sized temporaries the update allocates
    per implementation (the foreach AdamW ``_foreach_sqrt`` buffer is one whole parameter copy;
    fused and for-loop implementations hold ~none). ``paged`` optimizers may be evicted to host
    memory under pressure.
    """

    name: str
    aliases: tuple[str, ...] = ()
    states: float = 2.0
    state_bytes_per_element: Optional[float] = None
    quant_overhead_bytes_per_element: float = 0.0
    factored: bool = False
    paged: bool = False
    step_temp_states: dict[str, float] = field(factory=lambda: {"foreach": 1.0, "fused": 0.0,
                                                                  "for_loop": 0.0})
    default_impl: str = "foreach"
    source: str = ""


@frozen(kw_only=True)
class ShardingStrategy:
    """How data-parallel ranks split model state, and what they communicate.

    ``shards`` lists what is partitioned over the shard group: a subset of
    ``{"optimizer", "gradients", "parameters"}``. ``hybrid``: sharding happens within a group of
    ``hsdp_shard_size`` ranks (default: GPUs per node) and replicas across groups.
    ``param_gather``: parameters are all-gathered per layer for forward and again for backward
    (ZeRO-3 / FSDP FULL_SHARD). ``grad_collective``: ``all_reduce`` or ``reduce_scatter``.
    """

    name: str
    aliases: tuple[str, ...] = ()
    shards: frozenset[str] = frozenset()
    hybrid: bool = False
    param_gather: bool = False
    grad_collective: str = "all_reduce"
    framework: str = "ddp"
    source: str = ""

    def shard_group_size(self, *, dp: int, gpus_per_node: int,
                         hsdp_shard_size: Optional[int] = None) -> int:
        """How many ranks one copy of the sharded state is split over."""
        if not self.shards:
            return 1
        if self.hybrid:
            return max(1, min(dp, hsdp_shard_size or gpus_per_node))
        return dp
