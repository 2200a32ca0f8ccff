"""torchtune recipe YAML configs.

Schema: https://pytorch.org/torchtune/stable/deep_dives/configs.html and the recipe configs in
https://github.com/pytorch/torchtune/tree/main/recipes/configs . Models are builder functions
(``torchtune.models.llama3_2.lora_llama3_2_3b``): the builder name, less its ``lora_``/``qlora_``
prefix and ``_base``/``_instruct`` suffix, is looked up in :data:`BUILDERS`. torchtune trains in
the recipe's ``dtype`` without an fp32 copy (``precision: pure``). Distributed recipes
(``fsdp_*``/``*_dim`` keys) shard with FSDP2 FULL_SHARD.
"""

from __future__ import annotations

import os
from typing import Any

from fmest.configs._base import DATA, HYPERPARAM, LOGGING, Sink, join

FORMAT = "torchtune"

# torchtune builder (torchtune/models/<family>/_model_builders.py) -> fmest preset name
BUILDERS = {
    "llama2_7b": "meta-llama/Llama-2-7b-hf", "llama2_13b": "meta-llama/Llama-2-13b-hf",
    "llama2_70b": "meta-llama/Llama-2-70b-hf",
    "llama3_8b": "meta-llama/Meta-Llama-3-8B", "llama3_70b": "meta-llama/Meta-Llama-3-70B",
    "llama3_1_8b": "meta-llama/Llama-3.1-8B", "llama3_1_70b": "meta-llama/Llama-3.1-70B",
    "llama3_1_405b": "meta-llama/Llama-3.1-405B",
    "llama3_2_1b": "meta-llama/Llama-3.2-1B", "llama3_2_3b": "meta-llama/Llama-3.2-3B",
    "llama3_3_70b": "meta-llama/Llama-3.3-70B-Instruct",
    "code_llama2_7b": "codellama/CodeLlama-7b-hf",
    "mistral_7b": "mistralai/Mistral-7B-v0.1",
    "gemma_2b": "google/gemma-2b", "gemma_7b": "google/gemma-7b",
    "gemma2_2b": "google/gemma-2-2b", "gemma2_9b": "google/gemma-2-9b",
    "gemma2_27b": "google/gemma-2-27b",
    "phi3_mini": "microsoft/Phi-3-mini-4k-instruct",
    "qwen2_0_5b": "Qwen/Qwen2-0.5B", "qwen2_1_5b": "Qwen/Qwen2-1.5B", "qwen2_7b": "Qwen/Qwen2-7B",
    "qwen2_5_0_5b": "Qwen/Qwen2.5-0.5B", "qwen2_5_1_5b": "Qwen/Qwen2.5-1.5B",
    "qwen2_5_3b": "Qwen/Qwen2.5-3B", "qwen2_5_7b": "Qwen/Qwen2.5-7B",
    "qwen2_5_14b": "Qwen/Qwen2.5-14B", "qwen2_5_32b": "Qwen/Qwen2.5-32B",
    "qwen2_5_72b": "Qwen/Qwen2.5-72B", "qwen3_8b": "Qwen/Qwen3-8B",
}

# torchtune module names -> the Hugging Face names fmest's model specs use
_MODULES = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj",
            "output_proj": "o_proj", "o_proj": "o_proj"}
_MLP = ["gate_proj", "up_proj", "down_proj"]

_OPTIMIZERS = {
    "torch.optim.adamw": "adamw", "torch.optim.adam": "adamw",
    "torch.optim.sgd": "sgd", "bitsandbytes.optim.pagedadamw8bit": "paged_adamw_8bit",
    "bitsandbytes.optim.adamw8bit": "adamw_8bit", "bitsandbytes.optim.pagedadamw": "paged_adamw",
    "bitsandbytes.optim.pagedadamw32bit": "paged_adamw", "bitsandbytes.optim.lion8bit":
    "lion_8bit", "bitsandbytes.optim.pagedlion8bit": "lion_8bit",
    "torchao.prototype.low_bit_optim.adamw8bit": "adamw_8bit",
    "torchao.optim.adamw8bit": "adamw_8bit",
}
_LOSSES = {"cewithchunkedoutputloss": "chunked", "linearcrossentropyloss": "fused",
           "crossentropyloss": "standard"}
_DTYPES = {"bf16": "bf16", "fp32": "fp32", "fp16": "fp16"}
_IGNORED = {
    "output_dir": LOGGING, "checkpointer": "checkpoint loading/saving only (the model comes "
                                           "from model._component_)",
    "resume_from_checkpoint": LOGGING, "save_adapter_weights_only": LOGGING,
    "seed": LOGGING, "shuffle": DATA, "metric_logger": LOGGING, "log_every_n_steps": LOGGING,
    "log_peak_memory_stats": LOGGING, "log_level": LOGGING, "profiler": LOGGING,
    "device": "fmest estimates GPUs", "lr_scheduler": HYPERPARAM, "clip_grad_norm": HYPERPARAM,
    "dataset": DATA, "collate_fn": DATA, "custom_sharded_layers": "wrapping granularity; fmest "
                                                                  "assumes one unit per layer",
    "tensor_parallel_plan": "fmest knows only the tensor-parallel degree",
    "activation_offloading_use_streams": "overlap detail; same bytes per GPU",
    "cpu_offload": "see fsdp_cpu_offload", "run_val_every_n_steps": LOGGING,
    "dataset_val": LOGGING, "save_last_epoch_only": LOGGING, "keep_last_n_checkpoints": LOGGING,
    "low_cpu_ram": "loading only", "ac_mode": "fmest knows only whether checkpointing is on",
    "ac_option": "fmest knows only whether checkpointing is on",
}


def builder_model(component: str, doc: dict) -> tuple[str, str]:
    """(fmest model, technique) of a torchtune model builder path."""
    name = str(component).strip().split(".")[-1]
    tech = "full"
    for prefix, t in (("qlora_", "qlora"), ("lora_", "lora")):
        if name.startswith(prefix):
            name, tech = name[len(prefix):], t
    base = name
    for suffix in ("_base", "_instruct"):
        base = base.removesuffix(suffix)
    if base in BUILDERS:
        return BUILDERS[base], tech
    # Unknown builder: the HF checkpoint folder often names the model (or is a local config).
    ckpt = (doc.get("checkpointer") or {}).get("checkpoint_dir") if isinstance(
        doc.get("checkpointer"), dict) else None
    if ckpt:
        if os.path.isfile(os.path.join(str(ckpt), "config.json")):
            return str(ckpt), tech
        # the folder's name (Meta-Llama-3.1-8B-Instruct): the engine's model resolution looks
        # it up in the model registry, so any plugin's presets resolve (an unknown name fails
        # there with the nearest registered names)
        return os.path.basename(str(ckpt).rstrip("/")), tech
    return str(component).strip(), tech


def _model(block: Any, sink: Sink, doc: dict) -> None:
    block = sink.mapping("model", block)
    comp = block.get("_component_")
    if not comp:
        raise sink.error("model._component_", "required: the model builder, e.g. "
                         "torchtune.models.llama3_2.lora_llama3_2_3b")
    model, tech = builder_model(comp, doc)
    sink.set("model", model, "model._component_")
    sink.set("training.technique", tech, "model._component_")
    if tech == "qlora":
        sink.set("training.quantization_bits", 4, "model._component_")
    targets: list[str] = []
    target_keys = [k for k in ("lora_attn_modules", "apply_lora_to_mlp", "apply_lora_to_output")
                   if k in block]
    for name, value in block.items():
        key = join("model", name)
        if name == "_component_":
            continue
        if name == "lora_rank":
            sink.set("training.lora_rank", sink.int_(key, value), key)
        elif name == "lora_alpha":
            sink.set("training.lora_alpha", sink.num(key, value), key)
        elif name == "lora_attn_modules":
            for m in (value or []):
                targets.append(sink.choice(key, m, _MODULES))
        elif name == "apply_lora_to_mlp":
            if sink.bool_(key, value):
                targets += _MLP
        elif name == "apply_lora_to_output":
            if sink.bool_(key, value):
                targets.append("lm_head")
        elif name == "quantize_base":
            if sink.bool_(key, value):
                sink.set("training.technique", "qlora", key)
                sink.set("training.quantization_bits", 4, key)
            else:
                sink.ignore(key, "false: base weights not quantised")
        elif name == "use_dora":
            sink.ignore(key, "DoRA's magnitude vectors are not modelled (estimated as LoRA)")
        elif name == "lora_dropout":
            sink.ignore(key, HYPERPARAM)
        else:
            sink.ignore(key, "builder argument not used by fmest")
    if target_keys:
        sink.set("training.lora_target_modules", targets or ["q_proj", "v_proj"],
                 "model." + "+".join(target_keys))


def _component(block: Any, sink: Sink, key: str) -> tuple[str, dict]:
    block = sink.mapping(key, block)
    comp = str(block.get("_component_", "")).strip()
    return comp, block


def map_config(doc: dict, sink: Sink) -> None:
    sink.set("training.stack", "torchtune", "(torchtune recipe config)")   # issue 12
    sharded = None
    for name, value in doc.items():
        key = name
        if name == "model":
            _model(value, sink, doc)
        elif name == "batch_size":
            sink.set("training.micro_batch_size", sink.int_(key, value), key)
        elif name == "gradient_accumulation_steps":
            sink.set("training.grad_accum_steps", sink.int_(key, value), key)
        elif name == "enable_activation_checkpointing":
            sink.set("training.activation_checkpointing",
                     "full" if sink.bool_(key, value) else "none", key)
        elif name == "enable_activation_offloading":
            sink.set("training.activation_offload", sink.bool_(key, value), key)
        elif name == "optimizer_in_bwd":
            sink.set("training.optimizer_in_backward", sink.bool_(key, value), key)
        elif name == "compile":
            on = (any(bool(v) for v in value.values()) if isinstance(value, dict)
                  else sink.bool_(key, value))
            sink.set("training.compile", on, key)
        elif name == "dtype":
            sink.set("training.dtype", sink.choice(key, value, _DTYPES), key)
            sink.set("training.precision", "pure", key)
        elif name == "loss":
            comp, block = _component(value, sink, key)
            short = comp.split(".")[-1].lower()
            if short not in _LOSSES:
                raise sink.error(join(key, "_component_"), "unknown loss", value=comp,
                                 accepted=["torchtune.modules.loss.CEWithChunkedOutputLoss",
                                           "torchtune.modules.loss.LinearCrossEntropyLoss",
                                           "torch.nn.CrossEntropyLoss"])
            sink.set("training.loss", _LOSSES[short], join(key, "_component_"))
            for k in block:
                if k != "_component_":
                    sink.ignore(join(key, k), "loss detail; fmest knows only the loss kind")
        elif name == "optimizer":
            comp, block = _component(value, sink, key)
            lowered = comp.lower()
            opt = _OPTIMIZERS.get(lowered, lowered.split(".")[-1])
            if opt == "sgd" and float(block.get("momentum", 0) or 0) > 0:
                opt = "sgd_momentum"
            sink.set("training.optimizer", opt, join(key, "_component_"))
            for k, v in block.items():
                kk = join(key, k)
                if k == "_component_":
                    continue
                if k in ("fused", "foreach") and sink.bool_(kk, v):
                    sink.set("training.optimizer_impl", k, kk)
                elif k in ("fused", "foreach"):
                    sink.ignore(kk, "false")
                elif k == "momentum" and opt.startswith("sgd"):
                    sink.ignore(kk, "decides sgd vs sgd_momentum (one state buffer)")
                else:
                    sink.ignore(kk, HYPERPARAM)
        elif name == "tokenizer":
            block = sink.mapping(key, value)
            for k, v in block.items():
                kk = join(key, k)
                if k == "max_seq_len" and v is not None:
                    sink.set("training.seq_len", sink.int_(kk, v), kk)
                elif k == "max_seq_len":
                    sink.ignore(kk, "null: samples are not truncated; give --seq-len")
                else:
                    sink.ignore(kk, "tokenizer detail; fmest sizes the vocabulary from the "
                                "model config")
        elif name == "epochs":
            sink.set("workload.epochs", sink.num(key, value), key)
        elif name == "max_steps_per_epoch":
            if value is None:
                sink.ignore(key, "null: every epoch runs to the end of the data")
            else:
                steps = sink.int_(key, value)
                epochs = doc.get("epochs", 1)
                if isinstance(epochs, (int, float)) and not isinstance(epochs, bool) and \
                        float(epochs).is_integer():
                    sink.set("workload.max_steps", steps * int(epochs), f"{key} x epochs")
                else:
                    sink.ignore(key, "epochs is not a whole number; give --max-steps")
        elif name == "fsdp_cpu_offload":
            sink.set("parallelism.cpu_offload", "params" if sink.bool_(key, value) else "none",
                     key)
            sharded = sharded or key
        elif name == "fsdp_reshard_after_forward":
            sink.set("parallelism.fsdp",
                     "full_shard" if sink.bool_(key, value) else "shard_grad_op", key)
        elif name == "fsdp_sharding_strategy":
            from fmest.configs.accelerate import map_fsdp_config

            map_fsdp_config({name: value}, sink, "")
        elif name == "tensor_parallel_dim":
            sink.set("parallelism.tp", sink.int_(key, value), key)
            sharded = sharded or key
        elif name == "context_parallel_dim":
            sink.set("parallelism.cp", sink.int_(key, value), key)
            sharded = sharded or key
        elif name in ("data_parallel_shard_dim", "data_parallel_replicate_dim"):
            sharded = sharded or key
            sink.ignore(key, "the data-parallel degree follows from the GPU count and tp/cp; "
                        "HSDP replicas: give --fsdp hybrid_shard --hsdp-shard-size")
        elif name in _IGNORED:
            sink.ignore(key, _IGNORED[name])
        else:
            sink.ignore(key, "not used by fmest")
    if sharded and "parallelism.fsdp" not in sink.values:
        sink.set("parallelism.fsdp", "full_shard", f"{sharded} (distributed recipe: FSDP2)")
