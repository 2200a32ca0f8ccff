"""Registers the built-in optimizers (the optimizer transform's table).

Sources:
* AdamW: Loshchilov & Hutter 2019; two moment tensors per parameter (torch.optim.AdamW).
  The foreach implementation's ``_foreach_sqrt(exp_avg_sq)`` temporary is one full parameter
  copy at the step (measured: docs/research/trace_feasibility.md section 2a, 62.76 vs
  50.2 GiB for Llama-2-7B bf16); the fused and for-loop implementations hold none / one
  parameter at a time.
* 8-bit AdamW: Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization": both
  states in 8 bits with one fp32 absmax per block of 2048 values (4/2048 B per element and
  state).
* Paged optimizers: bitsandbytes docs (paged optimizers page to CPU on memory pressure; the
  device footprint equals the unpaged one until eviction).
* Adafactor: Shazeer & Stern 2018; factored second moments (row + column vectors per matrix),
  no first moment in the HF Trainer default (beta1=None).
* SGD with momentum: one buffer per parameter (torch.optim.SGD); without momentum none.
* Lion: Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms": one momentum state.
"""

import functools
from typing import TYPE_CHECKING, Any

from fmest.hookspecs import hookimpl

if TYPE_CHECKING:
    from fmest.transforms import OptimizerSpec

_NO_TEMPS = {"foreach": 0.0, "fused": 0.0, "for_loop": 0.0}
_BNB_BLOCK_OVERHEAD = 4.0 / 2048  # one fp32 absmax per 2048-value block (Dettmers et al. 2022)

@functools.lru_cache(maxsize=1)
def builtin_optimizers() -> tuple["OptimizerSpec", ...]:
    """The built-in optimizers, built on first use (loading the default plugins, as
    ``fmest --help`` does, builds nothing)."""
    from fmest.transforms import OptimizerSpec

    return (
        OptimizerSpec(name="adamw", aliases=("adam", "adamw_torch", "torch.optim.adamw",
                                             "adamw_hf", "decoupled_adamw", "fusedadam",
                                             "adamw_apex_fused", "deepspeed_adam", "cpu_adam"),
                      states=2, source="Loshchilov & Hutter 2019; torch.optim.AdamW"),
        OptimizerSpec(name="adamw_torch_fused", aliases=("adamw_fused",), states=2,
                      default_impl="fused", source="torch.optim.AdamW(fused=True)"),
        OptimizerSpec(name="adamw_8bit", aliases=("adamw_bnb_8bit", "adam8bit", "adamw8bit",
                                                  "bnb.optim.adamw8bit", "adam_8bit"),
                      states=2, state_bytes_per_element=1.0,
                      quant_overhead_bytes_per_element=_BNB_BLOCK_OVERHEAD,
                      step_temp_states=_NO_TEMPS, default_impl="fused",
                      source="Dettmers et al. 2022 (arXiv:2110.02861)"),
        OptimizerSpec(name="paged_adamw_8bit", aliases=("pagedadamw8bit",), states=2,
                      state_bytes_per_element=1.0, quant_overhead_bytes_per_element=_BNB_BLOCK_OVERHEAD,
                      paged=True, step_temp_states=_NO_TEMPS, default_impl="fused",
                      source="bitsandbytes paged optimizers; Dettmers et al. 2023 (QLoRA)"),
        OptimizerSpec(name="paged_adamw", aliases=("paged_adamw_32bit", "pagedadamw"), states=2,
                      paged=True, step_temp_states=_NO_TEMPS, default_impl="fused",
                      source="bitsandbytes paged optimizers; Dettmers et al. 2023 (QLoRA)"),
        OptimizerSpec(name="adafactor", aliases=("adafactor_hf",), states=0, factored=True,
                      step_temp_states=_NO_TEMPS, default_impl="for_loop",
                      source="Shazeer & Stern 2018 (arXiv:1804.04235); transformers Adafactor"),
        OptimizerSpec(name="sgd", aliases=("sgd_nomomentum",), states=0,
                      step_temp_states=_NO_TEMPS, source="torch.optim.SGD(momentum=0)"),
        OptimizerSpec(name="sgd_momentum", aliases=("momentum", "sgdm"), states=1,
                      step_temp_states=_NO_TEMPS, source="torch.optim.SGD(momentum>0)"),
        OptimizerSpec(name="lion", aliases=("lion_32bit", "lion_pytorch"), states=1,
                      step_temp_states=_NO_TEMPS, source="Chen et al. 2023 (arXiv:2302.06675)"),
        OptimizerSpec(name="lion_8bit", aliases=("paged_lion_8bit",), states=1,
                      state_bytes_per_element=1.0, quant_overhead_bytes_per_element=_BNB_BLOCK_OVERHEAD,
                      step_temp_states=_NO_TEMPS, default_impl="fused",
                      source="bitsandbytes Lion8bit; Dettmers et al. 2022"),
    )


def __getattr__(name: str) -> Any:
    if name == "BUILTIN_OPTIMIZERS":   # the table, as a module attribute (tests, docs)
        return builtin_optimizers()
    raise AttributeError(name)


@hookimpl
def fmest_register_optimizers(register):
    for spec in builtin_optimizers():
        register(spec)
