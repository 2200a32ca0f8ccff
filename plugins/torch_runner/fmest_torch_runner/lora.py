"""LoRA and QLoRA wrapping: the peft adapter config of a run, the adapters' dtype under its
precision policy, and the 4-bit (bitsandbytes nf4) base of QLoRA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

from fmest_torch_runner.records import RunSpec, torch_dtype

if TYPE_CHECKING:
    import torch
    from peft import LoraConfig


def lora_config(run: RunSpec) -> LoraConfig:
    from peft import LoraConfig

    targets: Union[list[str], str] = list(run.lora_targets)
    if set(targets) & {"all-linear", "all_linear", "linear"}:
        targets = "all-linear"
    return LoraConfig(r=run.lora_rank,
                      # peft annotates lora_alpha as int but only divides by it (alpha / r):
                      # a fractional alpha from the job is passed as it is
                      lora_alpha=run.lora_alpha,  # type: ignore[arg-type]
                      lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM")


def peft_kwargs(run: RunSpec) -> dict[str, Any]:
    # peft keeps adapters in fp32 unless told not to; "pure" means adapters in dtype too
    return {"autocast_adapter_dtype": run.precision != "pure"}


def wrap_lora(model: torch.nn.Module, run: RunSpec) -> torch.nn.Module:
    """``model`` with the run's LoRA adapters (a peft model)."""
    from peft import get_peft_model

    return get_peft_model(model, lora_config(run), **peft_kwargs(run))


def quantize_4bit(model: torch.nn.Module, run: RunSpec) -> torch.nn.Module:
    """QLoRA base: every linear but the head as a bitsandbytes Linear4bit (nf4) on CUDA.
    UNTESTED ON HARDWARE (no GPU in the session that wrote it)."""
    import bitsandbytes as bnb
    import torch

    compute = torch_dtype(run.param_dtype)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Linear) and name != "lm_head":
                q = bnb.nn.Linear4bit(child.in_features, child.out_features,
                                      bias=child.bias is not None, compute_dtype=compute,
                                      compress_statistics=run.double_quantization,
                                      quant_type="nf4")
                q.weight = bnb.nn.Params4bit(child.weight.data.cpu(), requires_grad=False,
                                             compress_statistics=run.double_quantization,
                                             quant_type="nf4")
                if child.bias is not None:
                    q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
                setattr(parent, name, q.cuda())
    return model


def build_qlora(model: torch.nn.Module, run: RunSpec, device: str,
                gc_kwargs: dict[str, Any]) -> torch.nn.Module:
    """The QLoRA model of a freshly built ``model``: 4-bit base on ``device``, peft's k-bit
    preparation (with gradient checkpointing when the run asks), then the adapters."""
    from peft import prepare_model_for_kbit_training

    model = quantize_4bit(model, run).to(device)
    model = prepare_model_for_kbit_training(
        model, use_gradient_checkpointing=run.gradient_checkpointing,
        gradient_checkpointing_kwargs=gc_kwargs)
    return wrap_lora(model, run)
