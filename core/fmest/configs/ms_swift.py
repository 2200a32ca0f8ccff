"""ms-swift command lines (``swift sft|pt|rlhf|infer|...``, ``megatron sft|pt|rlhf``) and
ms-swift YAML/JSON argument files (``swift sft config.yaml``, ``--config``).

Argument names, defaults and choices: modelscope/ms-swift at commit
3602360a562313afbf2ef6065fdf61f271a2c5b9: ``swift/arguments/base_args/base_args.py``
(``tuner_type`` default ``lora``), ``tuner_args.py`` (``lora_rank`` 8, ``lora_alpha`` 32,
``target_modules`` ``all-linear``), ``base_args/quant_args.py`` (``quant_method`` bnb/hqq/eetq/
quanto/fp8 with ``quant_bits``; no ``quant_method``: the model is not quantised),
``base_args/model_args.py`` (``torch_dtype``, ``attn_impl``), ``sft_args.py`` (``--deepspeed
zero0|zero1|zero2|zero3|zero2_offload|zero3_offload``: the bundled ``swift/config/<name>.json``),
``swift/trainers/arguments.py`` (``per_device_train_batch_size`` 1, ``gradient_checkpointing``
true), ``rlhf_args.py`` (``rlhf_type`` dpo/orpo/simpo/kto/cpo/rm/ppo/grpo/gkd, ``ref_model``,
``reward_model``, ``teacher_model``) and ``swift/megatron/arguments/megatron_args.py``
(``megatron sft``: Megatron-Core flags with underscores, ``tuner_type`` default ``full``).
The rest of a ``swift sft`` command is transformers ``Seq2SeqTrainingArguments``
(:func:`fmest.configs.training_args.map_keys`); the rest of a ``megatron`` command is
Megatron-LM's arguments (:func:`fmest.configs.megatron.map_config`).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

from fmest.configs._base import (
    DATA,
    HYPERPARAM,
    LOGGING,
    Sink,
    model_name,
    set_modules_to_save,
    target_list,
)

FORMAT = "ms-swift"

_TRAIN = {"sft", "pt", "rlhf"}
_SERVE = {"infer", "deploy", "sample", "rollout", "app", "web-ui", "webui"}
_NOT_TRAINING = {"export": "export", "eval": "evaluation", "merge-lora": "merge",
                 "merge_lora": "merge"}
#: swift/config/<name>.json bundled with ms-swift (zero_optimization.stage and offload)
DEEPSPEED = {"zero0": (0, "none"), "zero1": (1, "none"), "zero2": (2, "none"),
             "zero3": (3, "none"), "zero2_offload": (2, "optimizer"),
             "zero3_offload": (3, "params")}
_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16",
           "half": "fp16", "float32": "fp32", "fp32": "fp32", "float": "fp32"}
_ATTN = {"flash_attn": "flash", "flash_attention_2": "flash", "flash_attention_3": "flash",
         "flash_attention_4": "flash", "sdpa": "sdpa", "eager": "eager", "flex_attention":
         "flash"}
#: tuners estimated as LoRA (their extra state is small next to the base) and refused ones
_LORA_LIKE = {"longlora": "LongLoRA's shifted sparse attention is not modelled",
              "adalora": "AdaLoRA's rank allocation (orthogonal regulariser, initial rank "
                         "adalora_init_r) is not modelled",
              "lora_llm": "LoRA on the language model only"}
_TUNERS = ("lora", "full", "qlora (lora with --quant_method bnb --quant_bits 4|8)",
           *_LORA_LIKE)
_RLHF = {"dpo": "a frozen reference model (ref_model, else a copy of model)",
         "kto": "a frozen reference model (ref_model, else a copy of model)",
         "ppo": "the reference, reward and value models",
         "grpo": "the reference model (when beta > 0), reward models and the rollout engine",
         "gkd": "the teacher model", "orpo": "", "simpo": "", "cpo": "", "rm": ""}
_MEGATRON_OWN = {"model", "tuner_type", "train_type", "lora_rank", "lora_alpha", "lora_dropout",
                 "target_modules", "max_length", "torch_dtype", "rlhf_type"}
_DATA_PREFIXES = ("dataset", "val_dataset", "cached_", "load_from_cache_file", "split_dataset",
                  "dataloader_", "streaming", "system", "template", "model_author",
                  "model_name", "columns", "truncation_strategy", "max_pixels", "loss_scale",
                  "lazy_tokenize", "packing_num_proc", "shuffle", "interleave", "agent_template",
                  "new_special_tokens", "enable_thinking", "add_non_thinking_prefix",
                  "response_prefix", "use_chat_template", "label_names", "to_cached_dataset",
                  "write_batch_size", "num_labels", "problem_type", "task_type", "max_turns",
                  "multi_turn_scheduler", "use_gym_env", "gym_env", "stop_words", "data_seed",
                  "group_by_length", "remove_unused_columns", "external_plugins",
                  "custom_register_path", "use_hf", "hub_token", "model_revision",
                  "model_type", "dataset_num_proc")
_LOG_PREFIXES = ("output_dir", "logging_", "save_", "eval_", "report_to", "add_version",
                 "log_", "no_save_", "merge_lora", "push_to_hub", "hub_", "metric_for_best",
                 "greater_is_better", "eval", "logging", "run_name", "save", "resume_",
                 "ignore_args_error", "load_args", "load_data_args", "ddp_timeout",
                 "ddp_backend", "seed", "local_repo_path", "check_model", "predict_with_",
                 "early_stop", "callbacks", "test_convert_precision")
_HYPER_PREFIXES = ("learning_rate", "lr", "min_lr", "warmup", "weight_decay", "adam_",
                   "max_grad_norm", "use_rslora", "init_weights",
                   "lorap_lr_ratio", "vit_lr", "aligner_lr", "neftune", "lr_scheduler",
                   "beta", "epsilon", "rpo_alpha", "sft_alpha", "loss_type", "label_smoothing",
                   "delta", "desirable_weight", "undesirable_weight", "center_rewards",
                   "scale_rewards", "reward_weights", "importance_sampling", "tau_", "lmbda",
                   "enable_dft_loss", "loss_weights", "moe_aux_loss_coeff",
                   "router_aux_loss_coef", "dynamic_sample", "overlong_filter", "top_entropy",
                   "advantage_estimator", "kl_in_reward", "fipo_", "chord_", "lora_ga_",
                   "lora_bias", "lora_dtype")
_RL_PREFIXES = ("vllm_", "use_vllm", "sglang_", "num_generations", "max_completion_length",
                "temperature", "top_p", "top_k", "reward_funcs", "reward_model",
                "reward_model_plugin", "ref_model", "teacher_model", "teacher_deepspeed",
                "offload_teacher_model", "teacher_model_server", "sleep_level",
                "offload_model", "offload_optimizer", "move_model_batches", "async_generate",
                "steps_per_generation", "generation_batch_size", "num_iterations",
                "gkd_logits_topk", "log_completions", "log_entropy", "log_rollout",
                "repetition_penalty", "max_logprobs", "response_length", "multi_turn",
                "max_resample_times", "use_logits_to_keep", "offload_bridge")


def command_kind(head: str, sub: str) -> Optional[str]:
    """``training``, ``inference`` or the not-training kind of ``swift``/``megatron SUB``."""
    sub = sub.lower()
    if sub in _TRAIN:
        return "training"
    if head == "swift" and sub in _SERVE:
        return "inference"
    if head == "megatron" and sub == "export":
        return "conversion"
    return _NOT_TRAINING.get(sub)


def not_training_kind(program: str, args: dict) -> str:
    """``swift export`` is a quantization, merge or conversion by its flags."""
    names = {k.lstrip("-") for k in args}
    if "quant_bits" in names or "quant_method" in names:
        return "quantization"
    if "merge_lora" in names:
        return "merge"
    if program.endswith("eval"):
        return "evaluation"
    return "conversion" if names & {"to_mcore", "to_hf", "to_ollama"} or \
        program.startswith("megatron") else "export"


def _starts(name: str, prefixes: tuple) -> bool:
    return any(name.startswith(p) for p in prefixes)


def _scalar(value: Any) -> Any:
    if isinstance(value, list) and len(value) == 1:
        return value[0]
    return value


def map_config(doc: dict, sink: Sink) -> None:
    """An ms-swift YAML/JSON argument file (``swift sft config.yaml``): the sub-command is
    ``megatron sft`` when the file holds Megatron-Core keys, ``swift rlhf`` with
    ``rlhf_type``, else ``swift sft``."""
    megatron_keys = {"micro_batch_size", "global_batch_size", "tensor_model_parallel_size",
                     "pipeline_model_parallel_size", "expert_model_parallel_size",
                     "recompute_granularity", "train_iters"}
    if set(doc) & megatron_keys:
        program = "megatron sft"
    elif "rlhf_type" in doc:
        program = "swift rlhf"
    elif set(doc) & {"sampler_engine", "sampler_type"}:
        program = "swift sample"
    elif set(doc) & {"infer_backend", "max_new_tokens"} and not set(doc) & {
            "tuner_type", "train_type", "per_device_train_batch_size", "num_train_epochs"}:
        program = "swift infer"
    else:
        program = "swift sft"
    sink.ignore("(command)", f"an argument file: read as the arguments of {program!r}")
    map_args(program, {f"--{k}": v for k, v in doc.items()}, sink, None)


def _parse_argument_file(sink: Sink, key: str, value: str, text: str) -> dict:
    """An ms-swift argument file: JSON or YAML mapping of argument names to values (ms-swift
    ``swift/arguments`` ``--config``/positional file)."""
    import json

    import yaml

    try:
        doc = json.loads(text) if value.lower().endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise sink.error(key, f"the argument file is malformed: {str(exc).splitlines()[0]}",
                         value=value) from None
    if not isinstance(doc, dict):
        raise sink.error(key, "the argument file is not a mapping of argument names",
                         value=value)
    return doc


def _load_file(sink: Sink, key: str, value: str, find: Optional[Callable]) -> dict:
    path = find(sink, value) if find else (value if os.path.isfile(value) else None)
    if path is None:
        sink.unmodelled(key, f"argument file {value!r} not found next to the script or in the "
                        "folders above it; its settings are not read (pass it with --config)")
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            doc = _parse_argument_file(sink, key, value, fh.read())
    except (OSError, UnicodeDecodeError) as exc:
        raise sink.error(key, f"cannot read the argument file: {exc}", value=value) from None
    return {f"--{k}": v for k, v in doc.items()}


def map_args(program: str, args: dict, sink: Sink,
             find: Optional[Callable] = None) -> None:
    """The arguments ``{"--name": value}`` of ``program`` (``swift sft``, ``megatron rlhf``,
    ...) into ``sink``; an argument file named positionally or by ``--config`` is read first
    (the command line wins), its keys named ``file: key``."""
    head, _sp, sub = program.partition(" ")
    sub = sub or "sft"
    names: dict[str, tuple[Any, str]] = {}
    for key, value in args.items():
        if key == "(positional)":
            for item in value:
                if str(item).endswith((".yaml", ".yml", ".json")):
                    sink.ignore(str(item), "an argument file: its keys are read, named "
                                "'file: key'")
                    for k, v in _load_file(sink, str(item), str(item), find).items():
                        names.setdefault(k[2:], (v, f"{item}: {k[2:]}"))
                else:
                    sink.ignore(str(item), "a positional argument")
        elif key == "--config":
            sink.ignore(key, "an argument file: its keys are read, named 'file: key'")
            for k, v in _load_file(sink, key, str(value), find).items():
                names.setdefault(k[2:], (v, f"{value}: {k[2:]}"))
        else:
            names[key[2:] if key.startswith("--") else key] = (value, key)
    kind = command_kind(head, sub)
    if kind is None:
        raise sink.error(program, "not an ms-swift command fmest reads", value=sub,
                         accepted=("swift sft|pt|rlhf|infer|deploy|sample|rollout|export|eval",
                                   "megatron sft|pt|rlhf|export"))
    if kind not in ("training", "inference"):
        raise sink.not_training(program, not_training_kind(program, {
            f"--{k}": v for k, v in names.items()}))
    if kind == "inference":
        _serve(names, sink, program)
        return
    _train(head, sub, names, sink)


def _v(names: dict, name: str, default: Any = None) -> Any:
    return _scalar(names[name][0]) if name in names else default


def _k(names: dict, name: str, default_note: str) -> str:
    return names[name][1] if name in names else default_note


def _serve(names: dict, sink: Sink, program: str) -> None:
    sink.set("mode", "inference", program)
    for name, (value, key) in names.items():
        value = _scalar(value)
        if name == "model":
            sink.set("model", model_name(value), key)
        elif name == "torch_dtype":
            sink.set("training.dtype", sink.choice(key, value, _DTYPES), key)
        elif name == "max_new_tokens":
            sink.set("inference.output_tokens", sink.int_(key, value), key)
        elif name in ("max_batch_size",):
            sink.set("inference.batch", sink.int_(key, value), key)
        elif name in ("max_model_len", "vllm_max_model_len"):
            sink.set("inference.context", sink.int_(key, value), key)
        elif name == "vllm_gpu_memory_utilization":
            sink.set("inference.gpu_memory_utilization", sink.num(key, value), key)
        elif name == "infer_backend":
            backend = str(value).strip().lower()
            if backend in ("vllm", "pt", "transformers"):
                sink.set("inference.runtime", "vllm" if backend == "vllm" else "transformers",
                         key)
            else:
                sink.unmodelled(key, f"{backend}: serving memory is estimated as vLLM's")
        elif name in ("adapters",):
            sink.unmodelled(key, "LoRA adapters applied at serving time are not counted")
        elif name in ("vllm_tensor_parallel_size", "tensor_parallel_size", "tp",
                      "sglang_tp_size", "lmdeploy_tp"):
            sink.set("parallelism.tp", sink.int_(key, value), key)
        elif _starts(name, _DATA_PREFIXES) or _starts(name, _LOG_PREFIXES) or name in (
                "stream", "temperature", "top_p", "top_k", "host", "port", "served_model_name",
                "result_path", "load_data_args", "val_dataset", "write_batch_size",
                "use_hf", "repetition_penalty", "max_logprobs"):
            sink.ignore(key, "a serving/sampling option; does not change serving memory")
        else:
            sink.unmodelled(key, "a serving option fmest does not read")


def _technique(names: dict, sink: Sink, default: str) -> str:
    tkey = "tuner_type" if "tuner_type" in names else "train_type"
    ttype = str(_v(names, tkey, default)).strip().lower()
    key = _k(names, tkey, f"(ms-swift default tuner_type {default})")
    if ttype in ("lora", "full"):
        tech = ttype
    elif ttype in _LORA_LIKE:
        tech = "lora"
        sink.unmodelled(key, f"{ttype}: {_LORA_LIKE[ttype]}; estimated as LoRA")
    else:
        raise sink.error(key, "a tuner fmest cannot estimate", value=ttype, accepted=_TUNERS)
    method = _v(names, "quant_method")
    bits = _v(names, "quant_bits")
    if method is not None and str(method).lower() in ("bnb", "hqq", "eetq", "quanto",
                                                      "awq", "gptq", "gptq_v2"):
        mkey = names["quant_method"][1]
        if tech != "lora":
            raise sink.error(mkey, "a quantised base needs tuner_type lora", value=method,
                             accepted=("lora",))
        if bits is None and str(method).lower() in ("bnb", "hqq", "eetq", "quanto"):
            raise sink.error(mkey, "needs quant_bits", value=method, accepted=(4, 8))
        nbits = sink.choice(names["quant_bits"][1], bits, {4: 4, 8: 8, "4": 4, "8": 8}) \
            if bits is not None else 4
        tech = "qlora"
        sink.set("training.quantization_bits", nbits,
                 names["quant_bits"][1] if bits is not None else mkey)
        if str(method).lower() != "bnb":
            sink.unmodelled(mkey, f"{method}: estimated as bitsandbytes-style {nbits}-bit "
                            "block quantisation")
        if "bnb_4bit_use_double_quant" in names:
            dkey = names["bnb_4bit_use_double_quant"][1]
            sink.set("training.double_quantization",
                     sink.bool_(dkey, _v(names, "bnb_4bit_use_double_quant")), dkey)
    elif method is not None:
        sink.unmodelled(names["quant_method"][1], f"{method}: quantised training is not "
                        "modelled; estimated unquantised")
    elif bits is not None:
        sink.ignore(names["quant_bits"][1], "no quant_method: ms-swift loads the model "
                    "unquantised (quant_args.py get_quantization_config)")
    sink.set("training.technique", tech,
             f"{key}+{names['quant_method'][1]}" if tech == "qlora" else key)
    return tech


def _lora(names: dict, sink: Sink, tech: str) -> None:
    if tech == "full":
        for name in ("lora_rank", "lora_alpha", "lora_dropout", "target_modules"):
            if name in names:
                sink.ignore(names[name][1], "tuner_type is full")
        return
    rank = sink.int_(_k(names, "lora_rank", "lora_rank"), _v(names, "lora_rank", 8))
    sink.set("training.lora_rank", rank, _k(names, "lora_rank", "(ms-swift default lora_rank "
                                                                "8)"))
    alpha = sink.num(_k(names, "lora_alpha", "lora_alpha"), _v(names, "lora_alpha", 32))
    sink.set("training.lora_alpha", alpha, _k(names, "lora_alpha", "(ms-swift default "
                                                                   "lora_alpha 32)"))
    # modelscope/ms-swift 3602360a562313afbf2ef6065fdf61f271a2c5b9
    # swift/arguments/tuner_args.py: lora_dropout = 0.05
    dropout_value = _v(names, "lora_dropout", 0.05)
    dropout = 0.0 if dropout_value in (0, "0", "0.0") else sink.num(
        _k(names, "lora_dropout", "lora_dropout"), dropout_value)
    sink.set("training.lora_dropout", dropout, _k(names, "lora_dropout", "(ms-swift default "
                                                                       "lora_dropout 0.05)"))
    targets = names["target_modules"][0] if "target_modules" in names else ["all-linear"]
    targets = target_list(targets)
    sink.set("training.lora_target_modules", targets,
             _k(names, "target_modules", "(ms-swift default target_modules all-linear)"))
    for name in ("use_dora",):
        if name in names and sink.bool_(names[name][1], _v(names, name)):
            sink.unmodelled(names[name][1], "DoRA's magnitude vectors and weight-norm "
                            "activations are not modelled; estimated as LoRA")
    if "target_regex" in names:
        sink.unmodelled(names["target_regex"][1], "a regex of target modules; estimated "
                        "with target_modules")
    if "modules_to_save" in names:
        set_modules_to_save(sink, names["modules_to_save"][1], _v(names, "modules_to_save"))


#: rlhf types fmest models as a training objective (fmest.objectives)
_OBJECTIVES = ("dpo", "kto", "orpo", "simpo", "cpo")


def _rlhf(names: dict, sink: Sink, program: str, tech: str) -> None:
    rtype = str(_v(names, "rlhf_type", "dpo")).strip().lower()
    key = _k(names, "rlhf_type", "(ms-swift default rlhf_type dpo)")
    if rtype not in _RLHF:
        raise sink.error(key, "not an rlhf_type ms-swift has", value=rtype,
                         accepted=list(_RLHF))
    if rtype in _OBJECTIVES:
        # swift/arguments/rlhf_args.py @ 3602360a: dpo/kto with tuner_type full keep
        # ref_model (default: model itself); LoRA passes no ref_model (TRL disables the
        # adapters for the reference pass); cpo/orpo/simpo have none
        sink.set("training.objective", rtype, key)
        if rtype in ("dpo", "kto"):
            ref = "copy" if tech == "full" else "adapter"
            sink.set("training.reference_model", ref,
                     names["ref_model"][1] if ref == "copy" and "ref_model" in names else key)
        if "ref_model" in names and rtype in ("dpo", "kto") and tech == "full":
            sink.unmodelled(names["ref_model"][1], "a named reference checkpoint is counted "
                            "as a copy of the trained model (its own size is not read)")
        return
    extra = _RLHF[rtype]
    models = [f"{n}={' '.join(map(str, v)) if isinstance(v, list) else v}"
              for n, (v, _k2) in names.items() if n in ("ref_model", "reward_model",
                                                        "teacher_model", "value_model")]
    if extra or models:
        sink.unmodelled(key, f"{rtype}: the trained model is estimated; {extra or 'the named models'}"
                        f"{' (' + ', '.join(models) + ')' if models else ''} "
                        "are not counted")
    else:
        sink.ignore(key, f"{rtype}: one trained model, no reference model")


def _train(head: str, sub: str, names: dict, sink: Sink) -> None:
    from fmest.configs.training_args import map_keys

    program = f"{head} {sub}"
    mega = head == "megatron"
    sink.set("training.stack", "megatron-core" if mega else "hf-trainer", f"({program})")
    if "model" in names:
        sink.set("model", model_name(_v(names, "model")), names["model"][1])
    tech = _technique(names, sink, "full" if mega else "lora")
    _lora(names, sink, tech)
    if sub == "rlhf":
        _rlhf(names, sink, program, tech)
    elif "rlhf_type" in names:
        sink.ignore(names["rlhf_type"][1], f"not read by {program}")
    if "max_length" in names:
        sink.set("training.seq_len", sink.int_(names["max_length"][1], _v(names, "max_length")),
                 names["max_length"][1])
    dtype_key = None
    if "torch_dtype" in names:
        dtype_key = names["torch_dtype"][1]
        sink.set("training.dtype", sink.choice(dtype_key, _v(names, "torch_dtype"), _DTYPES),
                 dtype_key)
    own = {"model", "tuner_type", "train_type", "lora_rank", "lora_alpha", "lora_dropout",
           "target_modules", "max_length", "torch_dtype", "rlhf_type", "quant_method",
           "quant_bits",
           "bnb_4bit_use_double_quant", "use_dora", "target_regex", "modules_to_save"}
    rl: list[str] = []
    hf: dict = {}
    rest: dict = {}
    unknown: list[str] = []
    deepspeed_key: Optional[str] = None
    for name, (value, key) in names.items():
        if name in own:
            continue
        value = _scalar(value)
        if name == "deepspeed" and not mega:
            deepspeed_key = key
            _deepspeed(value, key, sink)
        elif name == "fsdp" and not mega:
            text = str(value).strip().lower()
            if text in ("", "none", "false"):
                sink.ignore(key, "no FSDP")
            else:
                sink.set("parallelism.fsdp", "full_shard", key)
                if "offload" in text:
                    sink.set("parallelism.cpu_offload", "params", key)
        elif name == "attn_impl":
            text = str(value).strip().lower()
            if text in _ATTN:
                sink.set("training.attention", _ATTN[text], key)
            else:
                sink.unmodelled(key, f"{value}: an attention kernel fmest does not know; sdpa "
                                "assumed")
        elif name == "use_liger_kernel" and not mega:
            if sink.bool_(key, value):
                sink.set("training.loss", "fused", key)
                sink.set("training.liger", True, key)
            else:
                sink.ignore(key, "false")
        elif name == "sequence_parallel_size" and not mega:
            sink.set("parallelism.cp", sink.int_(key, value), key)
        elif name in ("packing", "padding_free"):
            # packing / padding_free default False (swift/arguments/base_args/base_args.py,
            # template_args.py): Template.data_collator pads each batch to its longest sample;
            # packed / padding-free batches concatenate samples (modelscope/ms-swift
            # 3602360a562313afbf2ef6065fdf61f271a2c5b9)
            if sink.bool_(key, value):
                sink.set("training.padding", "packed", key)
                # packing turns padding_free on, and padding-free batches keep "sequences within
                # the batch causally isolated" (flash attention required): swift/arguments/
                # sft_args.py _check_padding_free, base_args/template_args.py lines 60-63 @
                # 3602360a562313afbf2ef6065fdf61f271a2c5b9
                sink.set("training.packed_attention", "document", key)
            elif sink.get("training.padding") is None:
                sink.set("training.padding", "longest", key)
            else:
                sink.ignore(key, "false; the other of packing / padding_free is on")
        elif name == "truncation_strategy" and not mega:
            # None -> 'delete' (TemplateArguments.__post_init__, swift/arguments/base_args/
            # template_args.py @ 3602360a): an over-long sample is dropped; left/right cut it;
            # split cuts it into max_length pieces (each a sample at the cap)
            strategy = "delete" if value is None else str(value).strip().lower()
            if strategy not in ("delete", "left", "right", "split"):
                raise sink.error(key, f"{value!r}: ms-swift accepts delete, left, right or split",
                           value=value)
            sink.set("training.truncation", "delete" if strategy == "delete" else "truncate",
                     key)
        elif name in ("packing_length", "padding_side", "mlp_padding_free"):
            sink.ignore(key, "packed/padding-free batches fill max_length; fmest sizes every "
                        "sample at the sequence length")
        elif name in ("freeze_vit", "freeze_aligner", "freeze_llm", "vit_gradient_checkpointing",
                      "freeze_parameters", "freeze_parameters_ratio", "trainable_parameters"):
            sink.unmodelled(key, "which parts of a multimodal model are trained; fmest "
                            "trains the language model and freezes the vision tower")
        elif name in ("use_galore", "galore_rank", "galore_quantization",
                      "galore_optim_per_parameter", "lisa_activated_layers", "use_badam"):
            sink.unmodelled(key, "a memory-saving optimizer fmest does not model; AdamW "
                            "states assumed")
        elif _starts(name, _RL_PREFIXES):
            rl.append(key)
        elif _starts(name, _DATA_PREFIXES):
            sink.ignore(key, DATA)
        elif _starts(name, _HYPER_PREFIXES):
            sink.ignore(key, HYPERPARAM)
        elif _starts(name, _LOG_PREFIXES):
            sink.ignore(key, LOGGING)
        elif mega:
            rest[f"--{name}"] = value
        elif name in ("per_device_train_batch_size", "gradient_accumulation_steps",
                      "gradient_checkpointing", "num_train_epochs", "max_steps", "optim",
                      "optimizer", "bf16", "fp16", "torch_compile",
                      "gradient_checkpointing_kwargs", "per_device_eval_batch_size",
                      "fsdp_config", "tf32"):
            hf["optim" if name == "optimizer" else name] = (value, key)
        else:
            unknown.append(key)
    if rl:
        sink.unmodelled(", ".join(rl), "rollout/reference/reward settings of the RL trainer "
                        "(vLLM engines, generations, other models) are not modelled; the "
                        "estimate is the trained model's step")
    if mega:
        _megatron_rest(rest, sink, dtype_key)
    else:
        if "gradient_checkpointing" not in hf:
            sink.set("training.activation_checkpointing", "full",
                     "(ms-swift default gradient_checkpointing true)")
        if "optim" in hf and str(hf["optim"][0]).lower() in ("galore", "lorap", "muon"):
            sink.unmodelled(hf.pop("optim")[1], "an optimizer fmest does not model; AdamW "
                            "states assumed")
        for name, (value, key) in hf.items():
            value = int(value) if isinstance(value, str) and value.isdigit() else value
            before = len(sink.ignored)
            map_keys({name: value}, sink)
            # map_keys names the key by its argument name; keep the file's spelling
            for n in range(before, len(sink.ignored)):
                sink.ignored[n] = sink.ignored[n].replace(name, key, 1)
            for fld, (v, k) in list(sink.values.items()):
                if k == name:
                    sink.values[fld] = (v, key)
        if dtype_key is not None and deepspeed_key is None:
            # swift loads the weights in torch_dtype (model_args.py) and the HF Trainer
            # steps them in that dtype: weights, grads and AdamW states alike
            sink.set("training.precision", "pure", dtype_key)
        elif dtype_key is not None and deepspeed_key is not None:
            sink.master_keys[sink.get("training.dtype")] = deepspeed_key
    if unknown:
        sink.unmodelled(", ".join(unknown), f"{program} arguments fmest does not know; "
                        "assumed not to change memory, time or cost")


def _deepspeed(value: Any, key: str, sink: Sink) -> None:
    text = str(value).strip()
    if text.lower() in DEEPSPEED:
        stage, offload = DEEPSPEED[text.lower()]
        sink.set("training.stack", "deepspeed", key)
        sink.set("parallelism.zero_stage", stage, f"{key} (swift/config/{text}.json)")
        sink.set("parallelism.cpu_offload", offload, f"{key} (swift/config/{text}.json)")
        # the bundled configs enable bf16/fp16 as "auto": the torch_dtype's, with DeepSpeed's
        # fp32 master weights
        sink.master_keys.setdefault("bf16", key)
        sink.master_keys.setdefault("fp16", key)
    elif text.endswith(".json"):
        sink.include(key, text, "deepspeed")
    else:
        raise sink.error(key, "not a DeepSpeed config name or .json path", value=value,
                         accepted=[*DEEPSPEED, "path/to/ds_config.json"])


def _megatron_rest(rest: dict, sink: Sink, dtype_key: Optional[str]) -> None:
    """The Megatron-Core arguments of ``megatron sft|pt|rlhf``, read by the Megatron-LM
    mapper; the weights' dtype is ``torch_dtype`` (else the checkpoint's)."""
    from fmest.configs import megatron

    values = {k: ("true" if v is True else v) for k, v in rest.items()}
    opt = values.get("--optimizer")
    if opt is not None and str(opt).strip().lower() not in ("adam", "adamw", "sgd"):
        # ms-swift adds optimizers to Megatron's (megatron_args.py: e.g. dist_muon)
        values.pop("--optimizer")
        sink.unmodelled("--optimizer", f"{opt}: an optimizer fmest does not model; AdamW "
                        "states assumed")
    dtype = sink.get("training.dtype")
    tech = sink.get("training.technique")
    keep = {f: sink.values[f] for f in ("training.dtype", "model", "training.technique",
                                        "training.lora_rank", "training.lora_alpha",
                                        "training.lora_dropout",
                                        "training.lora_target_modules", "training.seq_len",
                                        "hardware.gpus_per_node", "hardware.nodes")
            if f in sink.values}
    if dtype in ("bf16", "fp16") and not {"--bf16", "--fp16"} & set(values):
        values[f"--{dtype}"] = True
    megatron.map_config(values, sink)
    for f, v in keep.items():
        if f not in sink.values or f in ("model", "training.seq_len"):
            sink.values[f] = v
    if sink.get("training.dtype") == "fp32" and dtype_key is None and \
            sink.values["training.dtype"][1].startswith("(Megatron-LM default"):
        # ms-swift megatron loads the HF checkpoint in its own torch_dtype (bf16 for the
        # models of its examples): not Megatron-LM's fp32 default
        origin = "(ms-swift megatron: the checkpoint's torch_dtype; bf16 assumed)"
        sink.set("training.dtype", "bf16", origin)
        sink.set("training.precision", "master", origin)
        sink.unmodelled("(torch_dtype)", "not given: the checkpoint's dtype is used; bf16 "
                        "assumed (give --dtype)")
    elif dtype_key is not None and dtype in ("bf16", "fp16"):
        sink.set("training.precision", "master", dtype_key)
    if tech is not None:
        sink.values["training.technique"] = keep["training.technique"]


__all__ = ["DEEPSPEED", "FORMAT", "command_kind", "map_args", "map_config",
           "not_training_kind"]
