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
import re
from typing import Any, Optional

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
    # torchtune.models.llama3_2_vision._model_builders (11B/90B: Llama 3.2 Vision checkpoints)
    "llama3_2_vision_11b": "meta-llama/Llama-3.2-11B-Vision",
    "llama3_2_vision_90b": "meta-llama/Llama-3.2-90B-Vision",
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
    "collate_fn": DATA, "custom_sharded_layers": "wrapping granularity; fmest "
                                                                  "assumes one unit per layer",
    "tensor_parallel_plan": "fmest knows only the tensor-parallel degree",
    "activation_offloading_use_streams": "overlap detail; same bytes per GPU",
    "cpu_offload": "see fsdp_cpu_offload", "run_val_every_n_steps": LOGGING,
    "dataset_val": LOGGING, "save_last_epoch_only": LOGGING, "keep_last_n_checkpoints": LOGGING,
    "low_cpu_ram": "loading only", "ac_mode": "fmest knows only whether checkpointing is on",
    "ac_option": "fmest knows only whether checkpointing is on",
}


def builder_base(component: str) -> tuple[str, str]:
    """(builder name less ``lora_``/``qlora_`` and ``_base``/``_instruct``, technique)."""
    name = str(component).strip().split(".")[-1]
    tech = "full"
    for prefix, t in (("qlora_", "qlora"), ("lora_", "lora")):
        if name.startswith(prefix):
            name, tech = name[len(prefix):], t
    for suffix in ("_base", "_instruct"):
        name = name.removesuffix(suffix)
    return name, tech


def builder_model(component: str, doc: dict) -> tuple[str, str]:
    """(fmest model, technique) of a torchtune model builder path. A builder with no fmest
    preset gives the checkpoint folder when it holds a ``config.json``, else the builder path
    itself, so the model resolution's refusal names the builder (``--model`` overrides it)."""
    base, tech = builder_base(component)
    if base in BUILDERS:
        return BUILDERS[base], tech
    ckpt = (doc.get("checkpointer") or {}).get("checkpoint_dir") if isinstance(
        doc.get("checkpointer"), dict) else None
    if ckpt and os.path.isfile(os.path.join(str(ckpt), "config.json")):
        return str(ckpt), tech
    return str(component).strip(), tech


#: the generic builders whose arguments are the model's dimensions (pytorch/torchtune @
#: bd2a0fc7, torchtune/models/llama{2,3}/_component_builders.py ``llama2(...)``/``llama3(...)``:
#: vocab_size, num_layers, num_heads, num_kv_heads, embed_dim, max_seq_len, intermediate_dim
#: (default ``scale_hidden_dim_for_mlp``), norm_eps, rope_base)
_GENERIC = {"torchtune.models.llama2.llama2": "llama2", "torchtune.models.llama3.llama3": "llama3",
            "torchtune.models.llama2.lora_llama2": "llama2",
            "torchtune.models.llama3.lora_llama3": "llama3"}
_DIMS = {"vocab_size": "vocab_size", "num_layers": "num_hidden_layers",
         "num_heads": "num_attention_heads", "num_kv_heads": "num_key_value_heads",
         "embed_dim": "hidden_size", "intermediate_dim": "intermediate_size"}


def _scale_hidden_dim_for_mlp(dim: int, multiple_of: int = 256) -> int:
    """torchtune/models/llama2/_model_utils.py (same in llama3): 4 x int(2 dim / 3), rounded
    up to a multiple of 256."""
    hidden = 4 * int(2 * dim / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _generic_config(comp: str, block: dict, sink: Sink, key: str) -> Optional[dict]:
    """A Hugging Face Llama config from a generic builder's dimension arguments, or None."""
    if str(comp).strip() not in _GENERIC:
        return None
    cfg: dict[str, Any] = {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                           "tie_word_embeddings": False, "hidden_act": "silu"}
    for name, hf in _DIMS.items():
        if block.get(name) is not None:
            cfg[hf] = sink.int_(join(key, name), block[name])
    if not {"vocab_size", "num_hidden_layers", "num_attention_heads",
            "hidden_size"} <= set(cfg):
        return None
    cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
    cfg.setdefault("intermediate_size", _scale_hidden_dim_for_mlp(cfg["hidden_size"]))
    if block.get("max_seq_len") is not None:
        cfg["max_position_embeddings"] = sink.int_(join(key, "max_seq_len"), block["max_seq_len"])
    if block.get("norm_eps") is not None:
        cfg["rms_norm_eps"] = float(block["norm_eps"])
    if block.get("rope_base") is not None:
        cfg["rope_theta"] = float(block["rope_base"])
    return cfg


def _model(block: Any, sink: Sink, doc: dict, key: str = "model") -> None:
    block = sink.mapping(key, block)
    comp = block.get("_component_")
    if not comp:
        raise sink.error(f"{key}._component_", "required: the model builder, e.g. "
                         "torchtune.models.llama3_2.lora_llama3_2_3b")
    model, tech = builder_model(comp, doc)
    generic = _generic_config(comp, block, sink, key)
    if generic is not None:
        model = f"torchtune-{_GENERIC[str(comp).strip()]}-custom"
        dims = "+".join(join(key, n) for n in (*_DIMS, "max_seq_len", "norm_eps", "rope_base")
                        if n in block)
        sink.set("model_config", generic, dims)
    sink.set("model", model, f"{key}._component_")
    sink.set("training.technique", tech, "model._component_")
    if tech == "qlora":
        sink.set("training.quantization_bits", 4, "model._component_")
    targets: list[str] = []
    target_keys = [k for k in ("lora_attn_modules", "apply_lora_to_mlp", "apply_lora_to_output")
                   if k in block]
    prefix = key
    for name, value in block.items():
        key = join(prefix, name)
        if name == "_component_" or (generic is not None and name in (
                *_DIMS, "max_seq_len", "norm_eps", "rope_base")):
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
            if sink.bool_(key, value):
                sink.unmodelled(key, "DoRA's magnitude vectors and its weight-norm activations "
                                "are not modelled; estimated as LoRA")
            else:
                sink.ignore(key, "false: plain LoRA")
        elif name == "lora_dropout":
            sink.set("training.lora_dropout",
                     0.0 if value in (0, "0", "0.0") else sink.num(key, value), key)
        else:
            sink.ignore(key, "builder argument not used by fmest")
    if target_keys:
        targets = targets or ["q_proj", "v_proj"]
        if builder_base(comp)[0].startswith("phi3"):
            # torchtune's phi3 splits the checkpoint's fused qkv_proj / gate_up_proj
            # (torchtune/models/phi3/_convert_weights.py); fmest's Phi-3 spec has the fused
            # Hugging Face modules, so an adapter on any of q/k/v (gate/up) is counted on the
            # fused projection: r x (3 x hidden) output columns instead of r x hidden per slice
            fused = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
                     "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}
            targets = list(dict.fromkeys(fused.get(t, t) for t in targets))
            sink.unmodelled("model.lora_attn_modules", "torchtune adapts q/k/v (and gate/up) "
                            "separately; Phi-3's fused qkv_proj/gate_up_proj are adapted as one "
                            "module each (a few more adapter parameters)")
        sink.set("training.lora_target_modules", targets,
                 "+".join(join(prefix, k) for k in target_keys))


def _component(block: Any, sink: Sink, key: str) -> tuple[str, dict]:
    block = sink.mapping(key, block)
    comp = str(block.get("_component_", "")).strip()
    return comp, block


#: the recipes of ``tune run`` (recipes/*.py and recipes/dev/*.py of pytorch/torchtune at
#: bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1) that do not train
_GENERATE = ("generate", "dev/generate_v2", "dev/generate_v2_distributed")
_NOT_TRAINING = {"eleuther_eval": "evaluation", "quantize": "quantization"}
# losses of the preference/RL/distillation recipes (torchtune/rlhf/loss/*.py,
# torchtune/dev/grpo/loss.py, torchtune/dev/rl/linear_grpo_loss.py): the policy's forward and
# backward are the same as SFT's; what they add is a second model, named by the recipe
_RL_LOSSES = ("dpoloss", "rsoloss", "simpoloss", "ppoloss", "grposimpleloss", "grpoloss",
              "grpowithchunkedoutputloss", "lineargrpoloss")
_LAUNCH = re.compile(r"^\s*#.*?\btune\s+run\s+(.*?)\s--config\b")


def launch_line(path: str | None) -> tuple[str | None, int | None, int | None, str]:
    """``(recipe, nproc_per_node, nnodes, line)`` of the first ``tune run ... --config`` in
    the file's header comment (every torchtune config states how it is launched)."""
    if not path or not os.path.isfile(path):
        return None, None, None, ""
    try:
        with open(path, encoding="utf-8") as fh:
            head = fh.read(20000)
    except (OSError, UnicodeDecodeError):
        return None, None, None, ""
    for line in head.splitlines():
        m = _LAUNCH.match(line)
        if not m:
            continue
        words = m.group(1).replace("=", " ").split()
        recipe = nproc = nnodes = None
        i = 0
        while i < len(words):
            w = words[i]
            if w in ("--nproc_per_node", "--nnodes") and i + 1 < len(words):
                v = words[i + 1]
                num = int(v) if v.isdigit() else None
                if w == "--nnodes":
                    nnodes = num
                else:
                    nproc = num
                i += 2
                continue
            if not w.startswith("-") and recipe is None:
                recipe = w
            i += 1
        return recipe, nproc, nnodes, line.lstrip("# ").strip()
    return None, None, None, ""


def _recipe_kind(doc: dict, sink: Sink, recipe: str | None) -> str:
    """``training``, ``generate``, ``evaluation`` or ``quantization``: from the launch line's
    recipe, else the file name torchtune gives those configs, else their keys."""
    if recipe is not None:
        if recipe in _GENERATE:
            return "generate"
        return _NOT_TRAINING.get(recipe, "training")
    base = os.path.basename(sink.name).lower()
    if "generation" in base:
        return "generate"
    if "evaluation" in base:
        return "evaluation"
    if base.startswith("quantization"):
        return "quantization"
    if "optimizer" not in doc and "loss" not in doc:
        if "tasks" in doc:
            return "evaluation"
        if "max_new_tokens" in doc or "prompt" in doc:
            return "generate"
        if isinstance(doc.get("quantizer"), dict):
            return "quantization"
    return "training"


def _second_model(name: str, value, sink: Sink, why: str) -> None:
    """A frozen (or separately trained) second model the recipe holds beside the trained one:
    named with its size, not counted."""
    block = sink.mapping(name, value)
    comp = str(block.get("_component_", "")).strip()
    base = builder_base(comp)[0] if comp else ""
    size = BUILDERS.get(base, comp or "the trained model's builder")
    sink.unmodelled(join(name, "_component_") if comp else name,
                    f"{why} ({size}) is not counted: only the trained model's memory and "
                    "time are estimated")
    for k in block:
        if k != "_component_":
            sink.ignore(join(name, k), f"argument of the {name} builder")


def _loss_is_rl(value) -> bool:
    comp = value.get("_component_", "") if isinstance(value, dict) else ""
    return str(comp).strip().split(".")[-1].lower() in _RL_LOSSES


def _rl_loss(comp: str, doc: dict, sink: Sink, recipe: str | None) -> None:
    """A preference / RL loss. DPO/RSO (``torchtune/rlhf/loss/dpo.py``) and SimPO
    (``simpo.py``) set ``training.objective`` (fmest.objectives: the recipes' ``concatenated_
    forward`` runs chosen + rejected as one batch); DPO's reference is the base weights with
    the adapters disabled in ``lora_dpo_*`` recipes (``disable_adapter`` in
    recipes/lora_dpo_distributed.py) and the ``ref_model`` copy, sharded like the policy, in
    ``full_dpo_distributed``. PPO/GRPO losses: the trained model's step is estimated with the
    standard cross-entropy logits and the other models are named."""
    key = "loss._component_"
    short = comp.split(".")[-1]
    sink.set("training.loss", "standard", key)
    kind = short.lower()
    if kind in ("dpoloss", "rsoloss", "simpoloss"):
        sink.set("training.objective", "simpo" if kind == "simpoloss" else "dpo", key)
        if kind == "simpoloss":
            return
        lora_dpo = (recipe or "").startswith("lora_dpo") or (
            recipe is None and "lora" in str(section_comp(doc, "model")).lower())
        if lora_dpo:
            sink.set("training.reference_model", "adapter", f"{key} ({recipe or 'lora model'})")
        else:
            sink.set("training.reference_model", "copy", "ref_model" if "ref_model" in doc
                     else key)
        return
    model = section_comp(doc, "model") or section_comp(doc, "policy_model")
    size = BUILDERS.get(builder_base(model)[0], model) if model else "the policy"
    sink.unmodelled(key, f"{short}: the frozen reference copy of the trained model "
                    f"({size}) and its forward pass are not counted; only the trained "
                    "model is estimated")


def section_comp(doc: dict, name: str) -> str:
    block = doc.get(name)
    return str(block.get("_component_", "")).strip() if isinstance(block, dict) else ""


def map_config(doc: dict, sink: Sink) -> None:
    recipe, nproc, nnodes, line = launch_line(sink.path)
    kind = _recipe_kind(doc, sink, recipe)
    where = "recipe " + (f"{recipe} (header comment: {line})" if recipe else
                         f"file name {os.path.basename(sink.name)}")
    if kind in ("evaluation", "quantization"):
        raise sink.not_training("(header comment)" if recipe else "(file name)", kind,
                                f"torchtune {where}")
    generate = kind == "generate"
    if generate:
        sink.set("mode", "inference", where)
        # torchtune's generate recipes decode one prompt at a time with a static KV cache in
        # eager PyTorch (recipes/generate.py, recipes/dev/generate_v2.py), not paged vLLM
        sink.set("inference.runtime", "transformers", where)
        sink.set("inference.batch", 1, where + ": one prompt")
    else:
        sink.set("training.stack", "torchtune", "(torchtune recipe config)")   # issue 12
    sharded = None
    distributed = recipe is not None and "distributed" in recipe
    if recipe is not None and (distributed or recipe.endswith("single_device")):
        origin = f"header comment: {line}"
        if distributed and nproc is None:
            sink.unmodelled("(header comment)", f"{recipe} is a distributed recipe and its "
                            "launch line gives no --nproc_per_node: the GPU count is fmest's "
                            "default unless --gpus-per-node/--nodes are given")
        elif distributed:
            sink.set("hardware.gpus_per_node", nproc, origin)
            if nnodes is not None:
                sink.set("hardware.nodes", nnodes, origin)
            if generate and nproc is not None:   # generate_v2_distributed.py: "tp_degree =
                # dist.get_world_size()"
                sink.set("parallelism.tp", nproc * (nnodes or 1), origin + " (all GPUs TP)")
        else:
            sink.set("hardware.gpus_per_node", 1, origin + " (single-device recipe)")
        if distributed and not generate:
            sharded = f"header comment: {recipe}"
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
        elif name == "loss" and not _loss_is_rl(value):
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
        elif name == "loss" and _loss_is_rl(value):
            comp, block = _component(value, sink, key)
            _rl_loss(comp, doc, sink, recipe)
            for k in block:
                if k != "_component_":
                    sink.ignore(join(key, k), HYPERPARAM)
        elif name == "ref_model" and _loss_is_rl(doc.get("loss")) and str(
                doc["loss"].get("_component_", "")).split(".")[-1].lower() in ("dpoloss",
                                                                               "rsoloss"):
            sink.ignore(key, "DPO's reference model: the trained model's architecture, "
                        "counted as a frozen copy (see loss._component_)")
        elif name in ("teacher_model", "ref_model", "ref_policy_model"):
            _second_model(name, value, sink, {"teacher_model": "the frozen teacher model of "
                                              "knowledge distillation"}.get(
                                                  name, "the frozen reference model"))
        elif name == "reward_and_value_model":
            _second_model(name, value, sink, "the reward model and the trained value model "
                          "(two copies of this classifier)")
        elif name == "policy_model":
            _model(value, sink, doc, "policy_model")
            sink.unmodelled(join(name, "_component_"), "PPO also holds a frozen reference "
                            "copy of the policy (ref_policy_checkpointer) and the reward and "
                            "value models; only the policy's training is estimated")
        elif name == "kd_loss":
            comp, block = _component(value, sink, key)
            sink.unmodelled(join(key, "_component_"), f"{comp.split('.')[-1]}: the teacher's "
                            "logits and the KL term beside the cross-entropy are not counted")
            for k in block:
                if k != "_component_":
                    sink.ignore(join(key, k), "loss detail")
        elif name == "quantizer":
            if value is None:
                sink.ignore(key, "null: no quantization")
                continue
            comp, block = _component(value, sink, key)
            if generate:
                sink.unmodelled(join(key, "_component_"), f"{comp.split('.')[-1]}: quantized "
                                "generation is estimated with bf16 weights")
            else:
                # torchtune.training.quantization: *QATQuantizer.prepare swaps nn.Linear for
                # torchao fake-quantized linears (weights and activations rounded each forward,
                # in the compute dtype); their extra temporaries are not counted
                sink.unmodelled(join(key, "_component_"), f"{comp.split('.')[-1]}: QAT "
                                "fake quantization (fake-quantized weight/activation copies "
                                "each forward) is not modelled; estimated as plain bf16 "
                                "training")
            for k in block:
                if k != "_component_":
                    sink.ignore(join(key, k), "quantizer detail")
        elif name == "max_new_tokens" and generate:
            sink.set("inference.output_tokens", sink.int_(key, value), key)
        elif name in ("max_generated_tokens", "grpo_samples", "ppo_epochs", "ppo_batch_size",
                      "forward_batch_size", "num_steps", "temperature", "top_k",
                      "enable_kv_cache", "min_response_length", "penalise_no_eos",
                      "reward_penalty", "stop_token_ids", "whiten_rewards", "gamma", "lmbda",
                      "kd_ratio", "prompt", "max_new_tokens"):
            if generate:
                sink.ignore(key, "the prompt / sampling setting; same weights and KV cache")
            elif name in ("kd_ratio", "prompt"):
                sink.ignore(key, HYPERPARAM)
            else:
                sink.unmodelled(key, "an RL rollout setting: generating the rollouts (and "
                                "their KV cache) is not estimated, only the policy's training "
                                "step")
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
        elif name == "dataset":
            # torchtune SFT datasets default to packed=False and batch through
            # padded_collate_sft, which pads to the longest sample of the batch
            # (torchtune/datasets/_alpaca.py, torchtune/data/_collate.py, pytorch/torchtune
            # bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1); packed=True fills max_seq_len rows
            parts = value if isinstance(value, list) else [value]
            packed = any(isinstance(d, dict) and bool(d.get("packed")) for d in parts)
            sink.set("training.padding", "packed" if packed else "longest", key)
        elif name in _IGNORED:
            sink.ignore(key, _IGNORED[name])
        else:
            sink.ignore(key, "not used by fmest")
    if sharded and "parallelism.fsdp" not in sink.values:
        sink.set("parallelism.fsdp", "full_shard", f"{sharded} (distributed recipe: FSDP2)")
