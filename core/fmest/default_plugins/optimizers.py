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
* torchao low-bit AdamW (transformers ``adamw_torch_8bit`` / ``adamw_torch_4bit`` =
  ``torchao.optim.AdamW8bit`` / ``AdamW4bit``): pytorch/ao torchao/optim/subclass_8bit.py
  (commit 0196250048340e329638e17eff94969883c7c153: ``codes`` uint8, one per element, and an
  fp32 ``scale`` per ``block_size=256`` elements) and torchao/optim/subclass_4bit.py (commit
  029bb60a7abcead98e709e95a1a9c7b1dc92aef5: two 4-bit codes packed per uint8 and an fp32 scale
  per ``block_size=128``); torchao/optim/README.md: "block size is 256 for 8-bit ... and 128
  for 4-bit". torchao keeps tensors under 4096 elements (norms, biases) in full precision; that
  is a negligible share of an LLM's parameters and is not added.
* RMSprop: torch.optim.RMSprop keeps ``square_avg``; ``momentum_buffer`` only with momentum>0
  and ``grad_avg`` only when ``centered`` (transformers' ``rmsprop`` passes neither: one state).
  bitsandbytes ``RMSprop``/``RMSprop8bit`` are ``Optimizer1State`` (one state).
* Adagrad: torch.optim.Adagrad keeps one ``sum`` tensor per parameter.
* AdEMAMix: Pagliardini et al. 2024 (arXiv:2409.03137): a fast and a slow first-moment EMA
  plus the second moment (bitsandbytes ``AdEMAMix``: three states).
* Schedule-free: Defazio et al. 2024 (facebookresearch/schedule_free, ``AdamWScheduleFree``
  and ``RAdamScheduleFree`` keep ``z`` and ``exp_avg_sq``; ``SGDScheduleFree`` keeps ``z``).
* StableAdamW (transformers ``stable_adamw`` = torch-optimi ``StableAdamW``) and
  AnyPrecisionAdamW (torchdistx, Kahan summation off in transformers' default): the two
  AdamW moments; so do axolotl's ``optimi_adamw`` (torch-optimi AdamW) and ``adopt_adamw``
  (Taniguchi et al. 2024, ADOPT: ``exp_avg`` and ``exp_avg_sq``). axolotl's ``ao_adamw_8bit``
  / ``ao_adamw_4bit`` are the torchao optimizers above (axolotl
  src/axolotl/utils/schemas/enums.py ``CustomSupportedOptimizers``).
"""

import functools
from typing import TYPE_CHECKING, Any

from fmest.hookspecs import hookimpl

if TYPE_CHECKING:
    from fmest.transforms import OptimizerSpec

_NO_TEMPS = {"foreach": 0.0, "fused": 0.0, "for_loop": 0.0}
_BNB_BLOCK_OVERHEAD = 4.0 / 2048  # one fp32 absmax per 2048-value block (Dettmers et al. 2022)
_AO8_BLOCK_OVERHEAD = 4.0 / 256  # torchao OptimState8bit: fp32 scale per 256 (subclass_8bit.py)
_AO4_BLOCK_OVERHEAD = 4.0 / 128  # torchao OptimState4bit: fp32 scale per 128 (subclass_4bit.py)

#: the built-in optimizers that run their own update kernel, one pass per tensor, whatever
#: foreach/fused setting is asked (``OptimizerSpec.own_kernel``): bitsandbytes'
#: ``Optimizer1State``/``Optimizer2State.update_step`` (bitsandbytes/optim/optimizer.py) and
#: torchao's low-bit optimizers (torchao/optim/adam.py: one compiled step per parameter)
_OWN_KERNEL = frozenset({
    "adamw_8bit", "paged_adamw_8bit", "paged_adamw", "lion_8bit", "paged_lion_8bit",
    "paged_lion", "adamw_torch_8bit", "adamw_torch_4bit", "rmsprop_bnb_8bit", "ademamix",
    "ademamix_8bit", "paged_ademamix", "paged_ademamix_8bit"})


@functools.lru_cache(maxsize=1)
def builtin_optimizers() -> tuple["OptimizerSpec", ...]:
    """The built-in optimizers, built on first use (loading the default plugins, as
    ``fmest --help`` does, builds nothing)."""
    from attrs import evolve

    return tuple(evolve(spec, own_kernel=True) if spec.name in _OWN_KERNEL else spec
                 for spec in _specs())


def _specs() -> tuple["OptimizerSpec", ...]:
    from fmest.transforms import OptimizerSpec

    return (
        OptimizerSpec(name="adamw", aliases=("adam", "adamw_torch", "torch.optim.adamw",
                                             "adamw_hf", "decoupled_adamw", "fusedadam",
                                             "adamw_apex_fused", "deepspeed_adam", "cpu_adam",
                                             "adamw_torch_xla", "adamw_torch_npu_fused",
                                             "adamw_anyprecision", "optimi_adamw",
                                             "adopt_adamw"),
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
        OptimizerSpec(name="lion_8bit", states=1,
                      state_bytes_per_element=1.0, quant_overhead_bytes_per_element=_BNB_BLOCK_OVERHEAD,
                      step_temp_states=_NO_TEMPS, default_impl="fused",
                      source="bitsandbytes Lion8bit; Dettmers et al. 2022"),
        OptimizerSpec(name="paged_lion_8bit", states=1, paged=True,
                      state_bytes_per_element=1.0, quant_overhead_bytes_per_element=_BNB_BLOCK_OVERHEAD,
                      step_temp_states=_NO_TEMPS, default_impl="fused",
                      source="bitsandbytes PagedLion8bit; Dettmers et al. 2022"),
        OptimizerSpec(name="paged_lion", aliases=("paged_lion_32bit",), states=1, paged=True,
                      step_temp_states=_NO_TEMPS, default_impl="fused",
                      source="bitsandbytes PagedLion (32-bit); Chen et al. 2023"),
        OptimizerSpec(name="adamw_torch_8bit", aliases=("ao_adamw_8bit", "torchao_adamw8bit"),
                      states=2, state_bytes_per_element=1.0,
                      quant_overhead_bytes_per_element=_AO8_BLOCK_OVERHEAD,
                      step_temp_states=_NO_TEMPS, default_impl="fused",
                      source="torchao.optim.AdamW8bit: pytorch/ao torchao/optim/subclass_8bit.py "
                             "@0196250 (uint8 codes + fp32 scale per 256)"),
        OptimizerSpec(name="adamw_torch_4bit", aliases=("ao_adamw_4bit", "torchao_adamw4bit"),
                      states=2, state_bytes_per_element=0.5,
                      quant_overhead_bytes_per_element=_AO4_BLOCK_OVERHEAD,
                      step_temp_states=_NO_TEMPS, default_impl="fused",
                      source="torchao.optim.AdamW4bit: pytorch/ao torchao/optim/subclass_4bit.py "
                             "@029bb60 (packed 4-bit codes + fp32 scale per 128)"),
        OptimizerSpec(name="rmsprop", aliases=("rmsprop_torch", "torch.optim.rmsprop",
                                               "rmsprop_bnb", "rmsprop_bnb_32bit"),
                      states=1, source="torch.optim.RMSprop (square_avg; momentum=0, "
                                       "centered=False); bitsandbytes RMSprop (Optimizer1State)"),
        OptimizerSpec(name="rmsprop_momentum", aliases=("rmsprop_centered",), states=2,
                      source="torch.optim.RMSprop with momentum>0 (momentum_buffer) or centered "
                             "(grad_avg): two states"),
        OptimizerSpec(name="rmsprop_momentum_centered", states=3,
                      source="torch.optim.RMSprop with momentum>0 and centered: square_avg, "
                             "momentum_buffer, grad_avg"),
        OptimizerSpec(name="rmsprop_bnb_8bit", aliases=("rmsprop8bit",), states=1,
                      state_bytes_per_element=1.0,
                      quant_overhead_bytes_per_element=_BNB_BLOCK_OVERHEAD,
                      step_temp_states=_NO_TEMPS, default_impl="fused",
                      source="bitsandbytes RMSprop8bit (Optimizer1State, block-wise 8-bit)"),
        OptimizerSpec(name="adagrad", aliases=("torch.optim.adagrad",), states=1,
                      source="torch.optim.Adagrad (one 'sum' state)"),
        OptimizerSpec(name="ademamix", aliases=("ademamix_32bit",), states=3,
                      step_temp_states=_NO_TEMPS, default_impl="fused",
                      source="Pagliardini et al. 2024 (arXiv:2409.03137); bitsandbytes AdEMAMix"),
        OptimizerSpec(name="ademamix_8bit", states=3, state_bytes_per_element=1.0,
                      quant_overhead_bytes_per_element=_BNB_BLOCK_OVERHEAD,
                      step_temp_states=_NO_TEMPS, default_impl="fused",
                      source="bitsandbytes AdEMAMix8bit (three block-wise 8-bit states)"),
        OptimizerSpec(name="paged_ademamix", aliases=("paged_ademamix_32bit",), states=3,
                      paged=True, step_temp_states=_NO_TEMPS, default_impl="fused",
                      source="bitsandbytes PagedAdEMAMix (three 32-bit states)"),
        OptimizerSpec(name="paged_ademamix_8bit", states=3, paged=True,
                      state_bytes_per_element=1.0,
                      quant_overhead_bytes_per_element=_BNB_BLOCK_OVERHEAD,
                      step_temp_states=_NO_TEMPS, default_impl="fused",
                      source="bitsandbytes PagedAdEMAMix8bit"),
        OptimizerSpec(name="schedule_free_adamw", aliases=("schedule_free_radam",
                                                           "adamwschedulefree"), states=2,
                      step_temp_states=_NO_TEMPS, default_impl="for_loop",
                      source="facebookresearch/schedule_free AdamWScheduleFree / "
                             "RAdamScheduleFree (z, exp_avg_sq)"),
        OptimizerSpec(name="schedule_free_sgd", aliases=("sgdschedulefree",), states=1,
                      step_temp_states=_NO_TEMPS, default_impl="for_loop",
                      source="facebookresearch/schedule_free SGDScheduleFree (z)"),
        OptimizerSpec(name="stable_adamw", aliases=("stableadamw",), states=2,
                      step_temp_states=_NO_TEMPS, default_impl="for_loop",
                      source="torch-optimi StableAdamW (exp_avg, exp_avg_sq)"),
    )


def __getattr__(name: str) -> Any:
    if name == "BUILTIN_OPTIMIZERS":   # the table, as a module attribute (tests, docs)
        return builtin_optimizers()
    raise AttributeError(name)


@hookimpl
def fmest_register_optimizers(register):
    for spec in builtin_optimizers():
        register(spec)
