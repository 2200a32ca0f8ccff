"""OpenRLHF command lines (``deepspeed --module openrlhf.cli.train_sft ...``, ``python3 -m
openrlhf.cli.train_ppo_ray ...``).

Arguments: OpenRLHF/OpenRLHF ``openrlhf/cli/train_{sft,dpo,rm,ppo_ray}.py`` at commit
3c3be6234e0cb353e76bb8019947db9dfe99fca7 (dotted names: ``--model.model_name_or_path``,
``--data.max_len``, ``--train.micro_batch_size``, ``--ds.zero_stage`` default 2,
``--ds.param_dtype`` bf16, ``--ds.attn_implementation`` flash_attention_2, ``--ds.lora.rank``
0, ``--ds.lora.alpha`` 16, ``--actor.num_gpus_per_node`` 8) and the flat names before
commit ed62d0e20dea08397251eba5e010ee9dabc4d048 (its parent 76351db1ffe8e12db632a5bf450bbafb3e2031ed:
``--pretrain``, ``--max_len``, ``--micro_train_batch_size``, ``--zero_stage``, ``--bf16``,
``--flash_attn``, ``--lora_rank``, ...). The step runs in DeepSpeed
(``openrlhf/utils/deepspeed/deepspeed_utils.py get_train_ds_config``: ZeRO ``stage``,
``offload_optimizer`` on CPU with ``adam_offload``, bf16/fp16 enabled: low-precision weights
with DeepSpeed's fp32 master copy). PPO/GRPO, DPO and KTO also hold a reference model, reward
and critic models and vLLM engines: the estimate is the trained model's (the actor's) step and
each of the others is named in a warning.
"""

from __future__ import annotations

from typing import Any

from fmest.configs._base import DATA, HYPERPARAM, LOGGING, Sink, model_name, target_list

FORMAT = "openrlhf"

#: canonical (dotted) name -> the flat names of older OpenRLHF releases
_ALIASES = {
    "model.model_name_or_path": ("pretrain", "actor.model_name_or_path"),
    "data.max_len": ("max_len",),
    "train.micro_batch_size": ("micro_train_batch_size",),
    "train.batch_size": ("train_batch_size",),
    "ds.zero_stage": ("zero_stage",),
    "ds.param_dtype": ("param_dtype",),
    "ds.attn_implementation": ("attn_implementation",),
    "model.gradient_checkpointing_enable": ("gradient_checkpointing",
                                            "actor.gradient_checkpointing_enable"),
    "ds.lora.rank": ("lora_rank",),
    "ds.lora.alpha": ("lora_alpha",),
    "ds.lora.target_modules": ("target_modules",),
    "ds.load_in_4bit": ("load_in_4bit",),
    "ds.adam_offload": ("adam_offload",),
    "ds.packing_samples": ("packing_samples",),
    "ds.use_liger_kernel": ("use_liger_kernel",),
    "ds.tensor_parallel_size": ("ds_tensor_parallel_size",),
    "ds.ring_attn_size": ("ring_attn_size",),
    "train.max_epochs": ("max_epochs",),
    "reward.model_name_or_path": ("reward_pretrain",),
    "critic.model_name_or_path": ("critic_pretrain",),
    "ref.model_name_or_path": ("ref_pretrain",),
}
_CANON = {old: new for new, olds in _ALIASES.items() for old in olds}
_ATTN = {"flash_attention_2": "flash", "flash_attention_3": "flash", "sdpa": "sdpa",
         "eager": "eager", "kernels-community/vllm-flash-attn3": "flash"}
_OTHER_MODELS = {"train_dpo": "the frozen reference model (a copy of the trained model unless "
                              "--ref.model_name_or_path)",
                 "train_kto": "the frozen reference model",
                 "train_ppo_ray": "the reference model, the reward model(s), the critic and "
                                  "the vLLM rollout engines",
                 "train_rm": "", "train_sft": "", "train_prm": "", "train_knowledge_distillation":
                 "the teacher model"}


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _on(sink: Sink, key: str, value: Any) -> bool:
    return value is True or sink.bool_(key, value)


def map_config(doc: dict, sink: Sink) -> None:
    """A YAML/JSON dump of OpenRLHF arguments (``{"data.max_len": 2048, ...}``), read as
    ``openrlhf.cli.train_sft`` unless it names an actor (PPO)."""
    program = "openrlhf.cli.train_ppo_ray" if any(str(k).startswith(("actor.", "vllm."))
                                                 for k in doc) else "openrlhf.cli.train_sft"
    map_args(program, {f"--{k}": v for k, v in doc.items()}, sink)


def map_args(program: str, args: dict, sink: Sink) -> None:
    """The arguments ``{"--name": value}`` of ``program`` (``openrlhf.cli.train_sft``, ...)."""
    stem = program.rsplit(".", 1)[-1]
    if not stem.startswith("train_"):
        kind = "merge" if "combiner" in stem else "conversion"
        raise sink.not_training(program, kind, "not a training entry point")
    sink.set("training.stack", "deepspeed", f"({program}: DeepSpeed engine)")
    names: dict[str, tuple[Any, str]] = {}
    for arg, value in args.items():
        if arg == "(positional)":
            sink.ignore(" ".join(map(str, value)), "a positional argument")
            continue
        name = arg[2:] if arg.startswith("--") else arg
        names[_CANON.get(name, name)] = (_first(value), arg)

    def get(name: str, default: Any = None) -> Any:
        return names[name][0] if name in names else default

    def key(name: str, note: str = "") -> str:
        return names[name][1] if name in names else f"(OpenRLHF default --{name}{note})"

    done: set = set()

    def take(name: str) -> Any:
        done.add(name)
        return get(name)

    ppo = stem == "train_ppo_ray"
    if "model.model_name_or_path" in names:
        sink.set("model", model_name(take("model.model_name_or_path")),
                 key("model.model_name_or_path"))
    if "data.max_len" in names:
        sink.set("training.seq_len", sink.int_(key("data.max_len"), take("data.max_len")),
                 key("data.max_len"))
    else:   # every train_*.py: --data.max_len default 2048
        sink.set("training.seq_len", 2048, key("data.max_len", " 2048"))
    if "train.micro_batch_size" in names:
        sink.set("training.micro_batch_size",
                 sink.int_(key("train.micro_batch_size"), take("train.micro_batch_size")),
                 key("train.micro_batch_size"))
    else:   # train_ppo_ray.py: default 1; train_sft/dpo/rm.py: default 8
        micro = 1 if ppo else 8
        sink.set("training.micro_batch_size", micro, key("train.micro_batch_size", f" {micro}"))
    if "train.batch_size" in names:
        sink.train_batch.append((sink.int_(key("train.batch_size"), take("train.batch_size")),
                                 key("train.batch_size")))
    stage = sink.choice(key("ds.zero_stage"), take("ds.zero_stage") if "ds.zero_stage" in names
                        else 2, {0: 0, 1: 1, 2: 2, 3: 3, "0": 0, "1": 1, "2": 2, "3": 3})
    sink.set("parallelism.zero_stage", stage, key("ds.zero_stage", " 2"))
    if "bf16" in names or "fp16" in names:   # flags of older releases
        name = "bf16" if "bf16" in names else "fp16"
        if _on(sink, names[name][1], take(name)):
            sink.set("training.dtype", name, names[name][1])
    else:
        dtype = sink.choice(key("ds.param_dtype"), take("ds.param_dtype")
                            if "ds.param_dtype" in names else "bf16",
                            {"bf16": "bf16", "fp16": "fp16"})
        sink.set("training.dtype", dtype, key("ds.param_dtype", " bf16"))
    sink.set("training.precision", "master", sink.values["training.dtype"][1]
             if "training.dtype" in sink.values else "(DeepSpeed)")
    if "flash_attn" in names:   # older releases: a switch
        if _on(sink, names["flash_attn"][1], take("flash_attn")):
            sink.set("training.attention", "flash", names["flash_attn"][1])
    else:
        attn = str(take("ds.attn_implementation") or "flash_attention_2").strip()
        if attn in _ATTN:
            sink.set("training.attention", _ATTN[attn],
                     key("ds.attn_implementation", " flash_attention_2"))
        else:
            sink.unmodelled(key("ds.attn_implementation"), f"{attn}: an attention kernel fmest "
                            "does not know; sdpa assumed")
    ck = "model.gradient_checkpointing_enable"
    if ck in names and _on(sink, key(ck), take(ck)):
        sink.set("training.activation_checkpointing", "full", key(ck))
    rank = sink.int_(key("ds.lora.rank"), take("ds.lora.rank"), minimum=0) \
        if "ds.lora.rank" in names else 0
    four_bit = "ds.load_in_4bit" in names and _on(sink, key("ds.load_in_4bit"),
                                                  take("ds.load_in_4bit"))
    if rank > 0:
        tech = "qlora" if four_bit else "lora"
        sink.set("training.technique", tech, key("ds.lora.rank") +
                 ("+" + key("ds.load_in_4bit") if four_bit else ""))
        if four_bit:
            sink.set("training.quantization_bits", 4, key("ds.load_in_4bit"))
        sink.set("training.lora_rank", rank, key("ds.lora.rank"))
        sink.set("training.lora_alpha", sink.num(key("ds.lora.alpha"), take("ds.lora.alpha")
                                                 if "ds.lora.alpha" in names else 16),
                 key("ds.lora.alpha", " 16"))
        targets = take("ds.lora.target_modules") if "ds.lora.target_modules" in names \
            else "all-linear"
        sink.set("training.lora_target_modules", target_list(targets),
                 key("ds.lora.target_modules", " all-linear"))
    else:
        sink.set("training.technique", "full", key("ds.lora.rank", " 0"))
        for name in ("ds.lora.alpha", "ds.lora.target_modules", "ds.load_in_4bit"):
            if name in names:
                take(name)
                sink.ignore(key(name), "no LoRA (--ds.lora.rank 0): not used")
    if "ds.adam_offload" in names and _on(sink, key("ds.adam_offload"),
                                          take("ds.adam_offload")):
        sink.set("parallelism.cpu_offload", "optimizer", key("ds.adam_offload"))
    if "ds.use_liger_kernel" in names and _on(sink, key("ds.use_liger_kernel"),
                                              take("ds.use_liger_kernel")):
        sink.set("training.loss", "fused", key("ds.use_liger_kernel"))
        sink.set("training.liger", True, key("ds.use_liger_kernel"))
    if "ds.tensor_parallel_size" in names:
        sink.set("parallelism.tp", sink.int_(key("ds.tensor_parallel_size"),
                                             take("ds.tensor_parallel_size")),
                 key("ds.tensor_parallel_size"))
    if "ds.ring_attn_size" in names:
        sink.set("parallelism.cp", sink.int_(key("ds.ring_attn_size"),
                                             take("ds.ring_attn_size")),
                 key("ds.ring_attn_size"))
    if "train.max_epochs" in names:
        sink.set("workload.epochs", sink.num(key("train.max_epochs"), take("train.max_epochs")),
                 key("train.max_epochs"))
    if "optim" in names and str(take("optim")).strip().lower() != "adam":
        sink.unmodelled(key("optim"), f"{get('optim')}: an optimizer fmest does not model; "
                        "AdamW states assumed")
    if ppo:
        for name, fld, default in (("actor.num_gpus_per_node", "hardware.gpus_per_node", 8),
                                   ("actor.num_nodes", "hardware.nodes", 1)):
            value = sink.int_(key(name), take(name)) if name in names else default
            sink.set(fld, value, key(name, f" {default}"))
    if stem == "train_dpo":
        # openrlhf/cli/train_dpo.py: the reference is always its own Actor (also with LoRA),
        # built with the eval DeepSpeed config (ZeRO-3 kept, else stage 0), and the DPO trainer
        # runs chosen + rejected in one concatenated forward (fmest.objectives)
        sink.set("training.objective", "dpo", f"({program})")
        ref_key = names.get("ref.model_name_or_path", (None, f"({program}: ref = the model)"))[1]
        sink.set("training.reference_model", "copy", ref_key)
        if "ref.offload" in names and _on(sink, names["ref.offload"][1],
                                           names["ref.offload"][0]):
            sink.unmodelled(names["ref.offload"][1], "the reference model's weights are "
                            "offloaded to CPU between its forward passes; counted on the GPU "
                            "(an upper bound)")
            done.add("ref.offload")
    others = "" if stem == "train_dpo" else _OTHER_MODELS.get(stem, "")
    counted = {"model.model_name_or_path"} | ({"ref.model_name_or_path"}
                                              if stem == "train_dpo" else set())
    named = [f"{names[n][1]} {names[n][0]}" for n in names
             if n.endswith("model_name_or_path") and n not in counted
             or n in ("reward.remote_url",)]
    for n in names:
        if n.endswith("model_name_or_path") or n == "reward.remote_url":
            done.add(n)
    if others or named:
        # the keys naming the other models are the key of the warning (each is read)
        keys = [names[n][1] for n in names
                if n.endswith("model_name_or_path") and n not in counted
                or n in ("reward.remote_url",)]
        sink.unmodelled(", ".join(keys) if keys else program,
                        f"the estimate is the trained model's step; {others or ''}"
                        f"{' (' + ', '.join(named) + ')' if named else ''} not counted")
    rl: list[str] = []
    unknown: list[str] = []
    for name, (_value, k) in names.items():
        if name in done:
            continue
        if name.startswith(("ref.", "reward.", "critic.", "vllm.", "rollout.", "actor.",
                            "train.colocate", "train.async", "train.dynamic_batch",
                            "train.max_tokens_per_gpu", "train.partial_rollout",
                            "train.agent", "train.num_episodes", "train.enable_ema",
                            "ds.enable_sleep", "ds.value_head_prefix")):
            rl.append(k)
        elif name.startswith(("ckpt.", "logger.", "eval.", "use_ms", "local_rank",
                              "ds.use_universal_ckpt", "save_", "logging_", "use_wandb",
                              "wandb_", "use_tensorboard")):
            sink.ignore(k, LOGGING)
        elif name.startswith(("data.", "dataset", "prompt_data", "input_key", "output_key",
                              "apply_chat_template")):
            sink.ignore(k, DATA)
        elif name.startswith(("adam.", "muon.", "lr_", "min_lr", "max_norm", "train.seed",
                              "model.beta", "model.aux_loss_coef", "model.nll_loss_coef",
                              "model.label_smoothing", "model.ipo_enable", "algo.",
                              "model.margin_loss", "model.loss_type",
                              "model.compute_fp32_loss", "model.pretrain_mode",
                              "learning_rate", "l2", "seed", "actor_learning_rate",
                              "critic_learning_rate", "init_kl_coef", "ds.lora.dropout")):
            sink.ignore(k, HYPERPARAM)
        elif name in ("ds.packing_samples",):
            sink.ignore(k, "packed samples fill max_len; fmest sizes every sample at the "
                        "sequence length")
        elif name.startswith(("ds.zpg", "ds.overlap_comm", "ds.grad_accum_dtype",
                              "ds.deepcompile", "model.gradient_checkpointing_reentrant",
                              "data.disable_fast_tokenizer", "ds.experts_implementation")):
            sink.ignore(k, "a DeepSpeed/loading detail; same bytes per GPU in fmest's model")
        else:
            unknown.append(k)
    if rl:
        sink.unmodelled(", ".join(rl), "settings of the reference/reward/critic models, the "
                        "vLLM engines and the rollouts; not modelled (the estimate is the "
                        "actor's training step)")
    if unknown:
        sink.unmodelled(", ".join(unknown), f"arguments of {program} fmest does not know; "
                        "assumed not to change memory, time or cost")


__all__ = ["FORMAT", "map_args", "map_config"]
