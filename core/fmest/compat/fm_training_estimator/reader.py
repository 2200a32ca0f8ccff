"""Reading IBM fm-training-estimator's ``EstimateInput`` JSON.

Schema (fm_training_estimator/config/arguments.py, foundation-model-stack/fm-training-estimator):
``{"estimator_metadata": {"method": "theory|learned|hybrid", "base_data_path", ...},
"job_configs": [{"hf_training": <transformers TrainingArguments>, "fm": FMArguments,
"data": DataArguments, "infra": InfraArguments, "peft_lora": PeftLoraConfig}]}``.
The issue text calls the metadata block ``estimator``; both names are accepted.

Every field is either mapped onto an fmest job field or reported as ignored with the reason;
:func:`jobs_from_estimate_input` returns both.
"""

from __future__ import annotations

import re
from typing import Any

from fmest.convert import structure_bool, structure_int
from fmest.errors import InputError

# fm.torch_dtype -> our compute dtype
_DTYPES = {"float32": "fp32", "fp32": "fp32", "float16": "fp16", "fp16": "fp16", "half": "fp16",
           "bfloat16": "bf16", "bf16": "bf16"}

# gpuModel -> a name our GPU registry knows, by the memory the job says the GPU has.
_GPU_BY_MODEL_AND_GB = {("a100", 40): "A100-40GB", ("a100", 80): "A100-80GB",
                        ("h100", 80): "H100-SXM", ("h100", 94): "H100-NVL",
                        ("l40s", 48): "L40S", ("v100", 16): "V100", ("v100", 32): "V100-32GB"}

#: TrainingArguments with bf16 and fp16 both true
HALF_BOTH = ("bf16 and fp16 are both true; a run computes in one (transformers "
             "TrainingArguments raises 'At most one of fp16 and bf16 can be True, but not both')")

# Keys of hf_training that change nothing an estimate depends on (logging, I/O, seeds ...).
_HF_IRRELEVANT_PREFIXES = ("output_dir", "logging", "save", "eval", "report_to", "run_name",
                           "push_to_hub", "hub_", "seed", "data_seed", "dataloader",
                           "learning_rate", "lr_scheduler", "warmup", "weight_decay", "adam_",
                           "max_grad_norm", "label_smoothing", "overwrite", "do_", "disable_tqdm",
                           "resume_from", "log_", "remove_unused", "include_", "local_rank",
                           "use_cpu", "no_cuda", "greater_is_better", "load_best", "metric_for")


def _camel_to_snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def _get(d: dict, *names: str, default=None):
    for n in names:
        if n in d:
            return d[n]
    return default


def _targets(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value]
    text = str(value).strip().strip("[]")
    return [t.strip().strip("'\"") for t in text.split(",") if t.strip()]


def _bool(value: Any, path: str) -> bool:
    """A boolean the way the tools write it: ``"false"``, ``"no"``, ``"0"`` are false (a
    string is never tested for truthiness)."""
    try:
        return structure_bool(value)
    except ValueError:
        raise InputError(path, "expected a boolean", value=value,
                         accepted=("true", "false")) from None


def _block(cfg: dict, name: str, path: str) -> dict:
    """A job config's block (``fm``, ``infra`` ...) as a mapping; absent or null is empty."""
    value = cfg.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{path}.{name}", "expected an object (mapping of keys to values)",
                         value=type(value).__name__)
    return value


def _whole(value: Any, path: str) -> int:
    """A whole number this reader needs for a decision (values it only passes on are
    structured, once, by the input door)."""
    try:
        return structure_int(value)
    except ValueError:
        raise InputError(path, "expected a whole number", value=value) from None


def training_arguments_fields(hf: dict, path: str) -> tuple[dict, list[str]]:
    """Map a transformers ``TrainingArguments`` dict onto job sections.

    Returns ``({section: {field: value}}, ignored)``. Used by the EstimateInput reader and the
    TrainingArguments config importer alike.
    """
    out: dict[str, dict] = {"training": {}, "parallelism": {}, "workload": {}}
    ignored: list[str] = []
    if all(hf.get(k) is not None and _bool(hf[k], f"{path}.{k}") for k in ("bf16", "fp16")):
        raise InputError(f"{path}.fp16", HALF_BOTH, value=True)
    for key, value in hf.items():
        k = key
        p = f"{path}.{key}"
        if k == "per_device_train_batch_size":
            out["training"]["micro_batch_size"] = value
        elif k == "gradient_accumulation_steps":
            out["training"]["grad_accum_steps"] = value
        elif k == "gradient_checkpointing":
            out["training"]["activation_checkpointing"] = "full" if _bool(value, p) else "none"
        elif k in ("bf16", "fp16") and _bool(value, p):
            out["training"]["dtype"] = k
            out["training"].setdefault("precision", "amp")  # HF Trainer: fp32 weights + autocast
        elif k == "tf32":
            # TrainingArguments tf32 sets torch.backends.cuda.matmul.allow_tf32 (None: torch's
            # default, off): an fp32 job's GEMMs then run on tensor cores
            if value is not None:
                out["training"]["tf32"] = _bool(value, p)
        elif k in ("bf16", "fp16", "bf16_full_eval", "fp16_full_eval"):
            pass
        elif k == "optim":
            out["training"]["optimizer"] = str(value)
        elif k == "num_train_epochs":
            out["workload"]["epochs"] = value
        elif k == "max_steps":
            if value is not None and _whole(value, p) > 0:
                out["workload"]["max_steps"] = value
        elif k == "fsdp":
            if value is True:     # transformers >= 5: fsdp=True, strategy in fsdp_config
                value = "full_shard"
            text = " ".join(map(str, value)) if isinstance(value, list) else str(value or "")
            for strat in ("full_shard", "shard_grad_op", "hybrid_shard", "no_shard"):
                if strat in text:
                    out["parallelism"]["fsdp"] = strat
            if "offload" in text:
                out["parallelism"]["cpu_offload"] = "params"
        elif k == "fsdp_config" and isinstance(value, dict):
            if _bool(value.get("activation_checkpointing", False),
                     f"{p}.activation_checkpointing"):
                out["training"]["activation_checkpointing"] = "full"
            rest = sorted(set(value) - {"activation_checkpointing"})
            if rest:
                ignored.append(f"{p}: keys {rest} do not change per-GPU memory in fmest's model")
        elif k == "deepspeed":
            if value:
                ignored.append(f"{p}: pass the DeepSpeed file itself with --config to map it")
        elif k.startswith(_HF_IRRELEVANT_PREFIXES) or k in ("per_device_eval_batch_size",):
            ignored.append(f"{p}: does not affect training memory, time or cost")
        else:
            ignored.append(f"{p}: not used by fmest")
    return {s: v for s, v in out.items() if v}, ignored


#: The original's values for absent fields (fm_training_estimator/config/arguments.py and
#: transformers' TrainingArguments, which its HFTrainingArguments subclasses): FMArguments
#: ``torch_dtype="float32"``, ``block_size=2048``, ``technique="full"``, ``base_model_path=
#: "ibm-granite/granite-3b-code-base"``; TrainingArguments ``per_device_train_batch_size=8``,
#: ``num_train_epochs=3.0``, ``gradient_accumulation_steps=1``; InfraArguments
#: ``numGpusPerPod=0`` (search), ``numPods=1``, ``gpuModel="A100"``, ``gpu_memory_in_gb=80``.
DEFAULT_MODEL = "ibm-granite/granite-3b-code-base"
DEFAULTS = {"training.dtype": ("fp32", "fm.torch_dtype", "float32 (the model is loaded and "
                                                     "trained in fp32)"),
            "training.precision": ("pure", "fm.torch_dtype", "float32 (the model is loaded and "
                                                            "trained in fp32)"),
            "training.seq_len": (2048, "fm.block_size", "2048"),
            "training.micro_batch_size": (8, "hf_training.per_device_train_batch_size", "8"),
            "workload.epochs": (3, "hf_training.num_train_epochs", "3.0")}
#: Where :func:`estimate_input_jobs` lists, per job, the fields it set from :data:`DEFAULTS`
#: or the FSDP rule (``{path: reason}``); :mod:`fmest.inputs` gives them that origin.
DEFAULTS_KEY = "__fmte_defaults__"


def _job_from_config(cfg: dict, idx: int, method: str | None) -> tuple[dict, list[str]]:
    path = f"job_configs[{idx}]"
    if not isinstance(cfg, dict):
        raise InputError(path, "expected an object")
    cfg = {_camel_to_snake(k): v for k, v in cfg.items()}
    job: dict[str, Any] = {"training": {}, "parallelism": {}, "hardware": {}, "workload": {},
                           "options": {}}
    ignored: list[str] = []
    known = {"hf_training", "fm", "data", "infra", "peft_lora", "peft_qlora"}
    for extra in sorted(set(cfg) - known):
        ignored.append(f"{path}.{extra}: unknown block")

    fm = _block(cfg, "fm", path)
    job["model"] = _get(fm, "base_model_path", "baseModelPath") or DEFAULT_MODEL
    for key, value in fm.items():
        k = _camel_to_snake(key)
        p = f"{path}.fm.{key}"
        if k == "base_model_path":
            continue
        if k == "flash_attention_v2":
            job["training"]["attention"] = "flash" if _bool(value, p) else "sdpa"
        elif k == "block_size":
            if value is not None:
                job["training"]["seq_len"] = value
        elif k == "max_seq_length":
            if value is not None:
                ignored.append(f"{p}: fm-training-estimator sizes the sequence by block_size "
                               "(its default 2048 when absent), not max_seq_length")
        elif k == "torch_dtype":
            if value is None:
                continue
            if str(value) not in _DTYPES:
                raise InputError(p, "unknown dtype", value=value, accepted=sorted(_DTYPES))
            job["training"]["dtype"] = _DTYPES[str(value)]
            job["training"]["precision"] = "pure"  # the model is loaded in this dtype
        elif k == "technique":
            t = str(value).lower()
            if t not in ("full", "lora", "qlora"):
                raise InputError(p, "unknown technique", value=value,
                                 accepted=("full", "lora", "qlora"))
            job["training"]["technique"] = t
        elif value is None:
            continue
        else:
            ignored.append(f"{p}: not used by fmest (file paths of other configs are read "
                           "through --config)")

    hf = _block(cfg, "hf_training", path)
    mapped, ign = training_arguments_fields(hf, f"{path}.hf_training")
    ignored += ign
    for section, values in mapped.items():
        for k, v in values.items():
            if section == "training" and k in ("precision", "dtype") \
                    and job["training"].get("dtype", "fp32") != "fp32":
                continue  # the model is loaded in half precision: autocast changes nothing
            job[section][k] = v

    infra = {_camel_to_snake(k): v for k, v in _block(cfg, "infra", path).items()}
    gpus = infra.get("num_gpus_per_pod")
    pods = infra.get("num_pods")
    gpus = 0 if gpus is None else _whole(gpus, f"{path}.infra.num_gpus_per_pod")
    pods = 1 if pods is None else pods
    if gpus > 0:
        job["hardware"]["gpus_per_node"] = gpus
    job["hardware"]["nodes"] = pods
    gpu_model = str(infra.get("gpu_model") or "A100").lower().replace("nvidia", "").strip(" -")
    gb = infra.get("gpu_memory_in_gb")
    gb = 80 if gb is None else _whole(gb, f"{path}.infra.gpu_memory_in_gb")
    sizes = sorted(g for m, g in _GPU_BY_MODEL_AND_GB if m == gpu_model)
    if sizes and gb not in sizes:
        raise InputError(f"{path}.infra.gpu_memory_in_gb", f"no {gpu_model.upper()} has this "
                         "memory", value=gb, accepted=sizes)
    job["hardware"]["gpu"] = _GPU_BY_MODEL_AND_GB.get((gpu_model, gb), gpu_model)
    for k in sorted(set(infra) - {"num_gpus_per_pod", "num_pods", "gpu_model",
                                  "gpu_memory_in_gb"}):
        ignored.append(f"{path}.infra.{k}: not used by fmest")

    technique = job["training"].get("technique", "full")
    if technique in ("lora", "qlora"):
        lora = _block(cfg, "peft_lora", path)
        if lora.get("r") is not None:
            job["training"]["lora_rank"] = lora["r"]
        else:
            job["training"]["lora_rank"] = 4       # PeftLoraConfig.r
        if lora.get("lora_alpha") is not None:
            job["training"]["lora_alpha"] = lora["lora_alpha"]
        job["training"]["lora_target_modules"] = _targets(
            lora.get("target_modules") or "[q_proj, v_proj]")
        for k in sorted(set(lora) - {"r", "lora_alpha", "target_modules"}):
            ignored.append(f"{path}.peft_lora.{k}: does not change memory in fmest's model")
    elif cfg.get("peft_lora"):
        ignored.append(f"{path}.peft_lora: technique is full, LoRA settings unused")
    qlora = _block(cfg, "peft_qlora", path)
    if technique == "qlora":
        quant = str(qlora.get("quant_type") or "nf4").lower()
        if quant not in ("nf4", "fp4"):
            raise InputError(f"{path}.peft_qlora.quant_type", "unknown 4-bit type",
                             value=quant, accepted=("nf4", "fp4"))
        if qlora.get("use_double_quant") is not None:
            job["training"]["double_quantization"] = _bool(
                qlora["use_double_quant"], f"{path}.peft_qlora.use_double_quant")
        else:
            job["training"]["double_quantization"] = False   # PeftQLoraConfig's default
        for k in sorted(set(qlora) - {"quant_type", "use_double_quant"}):
            ignored.append(f"{path}.peft_qlora.{k}: not used by fmest")
    elif qlora and any(v is not None for v in qlora.values()):
        ignored.append(f"{path}.peft_qlora: technique is {technique}, QLoRA settings unused")

    data = _block(cfg, "data", path)
    if data.get("dataset"):
        job["workload"]["dataset_path"] = str(data["dataset"])
    for k in sorted(set(data) - {"dataset"}):
        if data[k] is not None:
            ignored.append(f"{path}.data.{k}: fmest counts tokens of local files itself")
    if method:
        job["options"]["method"] = method

    # the original's values for absent fields, and its FSDP rule
    defaults: dict[str, str] = {}
    dtype_given = "dtype" in job["training"]
    for dotted, (value, key, shown) in DEFAULTS.items():
        section, name = dotted.split(".")
        if name not in job[section]:
            if name == "precision" and dtype_given:
                continue
            if name == "epochs" and not job["workload"].get("dataset_path"):
                continue   # epochs size nothing without a dataset
            job[section][name] = value
            defaults[dotted] = f"{path}.{key} absent: fm-training-estimator's default {shown}"
    if gpus != 1 and job["parallelism"].get("fsdp") in (None, "none") \
            and not hf.get("fsdp") and not hf.get("deepspeed"):
        job["parallelism"]["fsdp"] = "full_shard"
        defaults["parallelism.fsdp"] = (
            f"{path}.hf_training.fsdp absent with infra.numGpusPerPod {gpus} (not 1): "
            "fm-training-estimator shards with FSDP full_shard")
    out = {k: v for k, v in job.items() if v != {}}
    out[DEFAULTS_KEY] = defaults
    return out, ignored


_META_UNUSED = {"token_estimation_version": "fmest counts a dataset's tokens with the model's "
                "local tokenizer or ~4 characters per token (fmest.datasets)"}


def is_estimate_input(data: Any) -> bool:
    """Whether a parsed JSON document is an ``EstimateInput`` (not fmest's own layout)."""
    return isinstance(data, dict) and bool(
        {"job_configs", "jobConfigs", "estimator", "estimator_metadata", "estimatorMetadata"}
        & set(data))


def estimate_input_jobs(data: Any) -> tuple[list[dict], list[str]]:
    """An ``EstimateInput`` as job dicts in fmest's layout, one per ``job_configs`` entry, and
    the ``"key.path: reason"`` of every field that sets nothing. Values are not structured
    here: :mod:`fmest.inputs` merges them with the other sources and builds each job once."""
    if not isinstance(data, dict):
        raise InputError("EstimateInput", "expected a JSON object")
    meta = _get(data, "estimator_metadata", "estimator", "estimatorMetadata", default={}) or {}
    if not isinstance(meta, dict):
        raise InputError("estimator_metadata", "expected an object (mapping of keys to values)",
                         value=type(meta).__name__)
    method = meta.get("method")
    if isinstance(method, str):
        method = method.lower()
        if method not in ("theory", "learned", "hybrid"):
            raise InputError("estimator.method", "unknown method", value=method,
                             accepted=("theory", "learned", "hybrid"))
    ignored = [f"estimator.{k}: {_META_UNUSED.get(k, 'not used by fmest')}"
               for k in meta if k not in ("method", "base_data_path", "baseDataPath")
               and meta[k] is not None and not (k == "token_estimation_version"
                                                and str(meta[k]) == "0")]
    if _get(meta, "base_data_path", "baseDataPath"):
        ignored.append("estimator.base_data_path: read by fm-training-estimator's SDK, CLI and "
                       "REST route (fmest.compat.fm_training_estimator, fmest "
                       "fm-training-estimator); fmest estimate chooses learned models with "
                       "--learned-model")
    known = {"estimator_metadata", "estimator", "estimatorMetadata", "job_configs",
             "jobConfigs"}
    ignored += [f"{k}: not a key of an EstimateInput (estimator_metadata, job_configs)"
                for k in data if k not in known]
    configs = _get(data, "job_configs", "jobConfigs")
    if not isinstance(configs, list) or not configs:
        raise InputError("job_configs", "expected a non-empty list of job configs")
    jobs = []
    for i, cfg in enumerate(configs):
        d, ign = _job_from_config(cfg, i, method)
        ignored += ign
        jobs.append(d)
    return jobs, ignored


def jobs_from_estimate_input(data: dict):
    """Parse an ``EstimateInput`` dict into fmest jobs and the list of ignored fields."""
    from fmest.convert import job_from_dict

    dicts, ignored = estimate_input_jobs(data)
    return [job_from_dict({k: v for k, v in d.items() if k != DEFAULTS_KEY}) for d in dicts], \
        ignored
