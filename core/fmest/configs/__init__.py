"""Training-config importers: read the config files of the tools that run training and turn them
into one fmest job dict (``fmest estimate --config FILE ...``).

One module per format; each walks every key of its file and either sets a job field (recording
the key it came from) or reports the key as ignored with the reason. Files merge in the order
given, later files win; a file a config names (``deepspeed: ds.json``) is loaded right after
it. Exporters are in :mod:`fmest.configs.export`. Only PyYAML is needed, none of the tools.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from attrs import field, frozen

from fmest.configs import (
    accelerate,
    axolotl,
    deepspeed,
    fm_training_estimator,
    launch,
    litgpt,
    llama_factory,
    megatron,
    ms_swift,
    openrlhf,
    torchtitan,
    torchtune,
    training_args,
    trl,
)
from fmest.configs._base import Sink
from fmest.errors import InputError

_MODULES = (training_args, deepspeed, accelerate, axolotl, torchtune, llama_factory,
            fm_training_estimator, torchtitan, megatron, litgpt, trl,
            launch, ms_swift, openrlhf)   # the last three: launch scripts and their CLIs
MAPPERS = {m.FORMAT: m.map_config for m in _MODULES}
FORMATS = tuple(MAPPERS)


@frozen(kw_only=True)
class ConfigMerge:
    """The merged result of some config files.

    ``data``: a job dict in fmest's layout (``{"model": ..., "training": {...}, ...}``), only
    the fields the files set. ``origins``: job field path -> ``"file: key.path"`` that set it
    (the last file to set it). ``ignored``: ``"file: key.path: reason"`` for every key that sets
    nothing and has no effect on the estimate. ``not_modelled``: ``"file: key.path: reason"``
    for every key read but not modelled although it may change the answer (warned in every
    output format). ``unresolved``: job field path -> ``"file: key.path: ..."`` for DeepSpeed
    ``"auto"`` values no other file resolved (fmest's default is used). ``files``:
    ``(file, format)`` in load order, included files too. ``batch_rules``: ``(total,
    "file: key")`` of every global-batch key (DeepSpeed ``train_batch_size``, Megatron-LM
    ``--global-batch-size``, torchtitan ``global_batch_size``), solved again by the input door
    once flags are merged (a global batch no GPU count splits is in ``unresolved`` under its
    ``"file: key"``).
    """

    data: dict = field(factory=dict)
    origins: dict = field(factory=dict)
    ignored: tuple = ()
    not_modelled: tuple = ()
    unresolved: dict = field(factory=dict)
    files: tuple = ()
    batch_rules: tuple = ()


# -- reading and detection ---------------------------------------------------------------
def parse_text(path: str, text: str) -> dict:
    """The top-level mapping of a JSON, YAML or TOML file, or of a text file of command-line
    flags (Megatron-LM arguments, as ``{"--flag": value}``); malformed text names file, line,
    column."""
    ext = os.path.splitext(path)[1].lower()
    if launch.is_script(path, text):   # a bash launch script: read by fmest.configs.launch
        return {launch.SCRIPT_KEY: text}
    if ext not in (".json", ".yaml", ".yml") and torchtitan.looks_like_toml(path, text):
        return torchtitan.parse_toml(path, text)
    if ext not in (".json", ".yaml", ".yml") and megatron.looks_like_args(text):
        return megatron.parse_args_text(text)
    if ext == ".json" or (ext not in (".yaml", ".yml") and text.lstrip().startswith("{")):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: (text)", f"malformed JSON at line {exc.lineno} column {exc.colno}: "
                             f"{exc.msg}") from None
        except RecursionError:
            raise InputError(f"{path}: (text)", "JSON nested too deeply") from None
    else:
        import yaml

        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise InputError(f"{path}: (text)", f"malformed YAML{where}: {problem}") from None
        except RecursionError:
            raise InputError(f"{path}: (text)", "YAML nested too deeply") from None
        if len(docs) > 1:
            raise InputError(f"{path}: (text)", "holds several YAML documents; give one config per file")
        doc = docs[0] if docs else {}
    doc = megatron.args_from_list(doc) or doc   # a list of Megatron-LM arguments
    if not isinstance(doc, dict):
        raise InputError(f"{path}: (top level)", "expected a mapping of keys at the top level",
                         value=type(doc).__name__)
    return doc


_LF_KEYS = {"finetuning_type", "stage", "template", "cutoff_len", "lora_target",
            "quantization_bit", "flash_attn", "dataset_dir", "enable_liger_kernel", "pure_bf16",
            "disable_gradient_checkpointing"}
_AXOLOTL_KEYS = {"base_model", "sequence_len", "micro_batch_size", "adapter", "lora_r",
                 "lora_target_linear", "num_epochs", "sample_packing", "load_in_4bit",
                 "load_in_8bit", "pad_to_sequence_len", "dataset_prepared_path"}
_DS_KEYS = {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size",
            "zero_allow_untested_optimizer", "steps_per_print", "wall_clock_breakdown"}
#: ms-swift argument files (swift/arguments/base_args/base_args.py, rlhf_args.py, model_args.py)
_SWIFT_KEYS = {"tuner_type", "train_type", "rlhf_type", "attn_impl", "quant_bits",
               "infer_backend", "sampler_engine", "sampler_type"}
_ACCEL_KEYS = {"compute_environment", "distributed_type", "machine_rank", "num_machines",
               "main_training_function", "rdzv_backend"}
_HF_KEYS = {"per_device_train_batch_size", "output_dir", "num_train_epochs", "optim",
            "logging_steps", "save_strategy", "eval_strategy", "evaluation_strategy",
            "lr_scheduler_type", "gradient_accumulation_steps", "per_device_eval_batch_size",
            "bf16", "fp16", "gradient_checkpointing", "max_steps", "deepspeed", "fsdp"}
_NAME_HINTS = (("deepspeed", ("ds_config", "deepspeed", "zero")),
               ("accelerate", ("accelerate",)), ("axolotl", ("axolotl",)),
               ("torchtune", ("torchtune", "_single_device", "_distributed")),
               ("llama-factory", ("llama_factory", "llamafactory", "llama-factory")),
               ("fm-training-estimator", ("estimate_input", "estimateinput")),
               ("torchtitan", ("torchtitan", "titan")),
               ("megatron", ("megatron", "nemo", "pretrain_gpt")),
               ("training-args", ("training_args", "trainingarguments", "trainer")))


def detect_from_doc(path: str, doc: dict) -> Optional[str]:
    keys = set(doc)
    if launch.SCRIPT_KEY in keys:
        return launch.FORMAT
    if keys & _SWIFT_KEYS and not keys & _LF_KEYS:
        return ms_swift.FORMAT
    if keys & {"job_configs", "jobConfigs"}:
        return "fm-training-estimator"
    if megatron.detect(doc):
        return "megatron"
    if torchtitan.detect(doc):
        return "torchtitan"
    if any(isinstance(v, dict) and "_component_" in v for v in doc.values()):
        return "torchtune"
    if keys & {"compute_environment", "distributed_type"}:
        return "accelerate"
    if keys & _DS_KEYS or any(isinstance(doc.get(k), dict) and "enabled" in doc[k]
                              for k in ("bf16", "fp16")):
        return "deepspeed"
    if litgpt.detect(doc):
        return "litgpt"
    if keys & _LF_KEYS:
        return "llama-factory"
    if trl.detect(doc):
        return "trl"
    if keys & _AXOLOTL_KEYS:
        return "axolotl"
    if keys & _HF_KEYS:
        return "training-args"
    if keys & _ACCEL_KEYS:
        return "accelerate"
    name = os.path.basename(path).lower()
    for fmt, hints in _NAME_HINTS:
        if any(h in name for h in hints):
            return fmt
    return None


def detect_format(path: str, text: str) -> str:
    """The format of a config file, from its keys (each tool's own keys) and, when the keys do
    not tell, its name. Raises :class:`InputError` listing the formats when neither does."""
    doc = parse_text(path, text)
    fmt = detect_from_doc(path, doc)
    if fmt is None:
        raise unknown_format(path, doc)
    return fmt


#: keys of a model's own Hugging Face ``config.json`` (transformers PretrainedConfig)
_MODEL_CONFIG_KEYS = {"hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size",
                      "intermediate_size", "hidden_act", "max_position_embeddings"}
#: NeMo's userbuffer (``tp_overlap``) configs: per-GEMM communication-overlap settings
_NEMO_UB_KEYS = {"qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad", "proj_fprop", "fc2_fprop"}


def unknown_format(path: str, doc: dict) -> InputError:
    """The refusal of a file no reader claims, naming what it looks like when that is clear
    (a model's config.json, a NeMo userbuffer fragment) and the formats otherwise."""
    keys = set(doc)
    if len(keys & _MODEL_CONFIG_KEYS) >= 3:
        return InputError(f"{path}: (format)", "a model's config.json, not a training config: "
                          "give it as --model FILE (with --config for the training files)",
                          accepted=FORMATS)
    if len(keys & _NEMO_UB_KEYS) >= 2:
        return InputError(f"{path}: (format)", "a NeMo tensor-parallel communication-overlap "
                          "(userbuffer) fragment that a run config includes "
                          "(model.ub_tp_comm_overlap_cfg), not a run by itself; give the run's "
                          "config", accepted=FORMATS)
    return InputError(f"{path}: (format)", "cannot tell which tool's config this is; give "
                      "--config-format", accepted=FORMATS)


# -- loading and merging -----------------------------------------------------------------
def _read(path: str, display: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise InputError(display, f"cannot read config file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(display, f"not UTF-8 text (byte {exc.start})") from None


def _put(data: dict, path: str, value: Any) -> None:
    if "." not in path:
        data[path] = value
        return
    section, name = path.split(".", 1)
    data.setdefault(section, {})[name] = value


def _lookup(data: dict, path: str, default: Any = None) -> Any:
    if "." not in path:
        return data.get(path, default)
    section, name = path.split(".", 1)
    return (data.get(section) or {}).get(name, default)


def data_parallel(get, origin) -> tuple[Optional[int], str, bool]:
    """``(dp, where the GPU count came from, whether a GPU count is known)`` from job field
    values (``get(path)``, ``origin(path)``): ``parallelism.dp``, else the world size
    ``hardware.gpus_per_node x hardware.nodes`` over ``tp x pp x cp`` (Megatron-LM
    ``initialize_model_parallel``: data-parallel size = world / (tp x pp x cp)). ``dp`` is
    ``None`` when no GPU count is known or the world is not a multiple of ``tp x pp x cp``."""
    if get("parallelism.dp") is not None:
        return int(get("parallelism.dp")), origin("parallelism.dp"), True
    gpn = get("hardware.gpus_per_node")
    if gpn is None:
        return None, "", False
    model_parallel = 1
    for k in ("tp", "pp", "cp"):
        model_parallel *= int(get(f"parallelism.{k}") or 1)
    world = int(gpn) * int(get("hardware.nodes") or 1)
    where = origin("hardware.gpus_per_node")
    if get("hardware.nodes") is not None:
        where += f" x {origin('hardware.nodes')}"
    return (world // model_parallel if world % model_parallel == 0 else None), where, True


MICRO, ACCUM, DP = "training.micro_batch_size", "training.grad_accum_steps", "parallelism.dp"


def solve_train_batch(total: int, where: str, get, origin) -> Optional[tuple[str, int, str]]:
    """The global-batch rule ``total = micro x accumulation x dp`` (DeepSpeed
    ``train_batch_size``, Megatron-LM ``--global-batch-size``, torchtitan
    ``global_batch_size``): check it when all three are known, else derive the one factor left
    open as ``(field, value, origin)`` (DeepSpeed's config.py and Megatron-LM's
    ``num_microbatches_calculator`` derive it the same way; with neither micro nor
    accumulation given, accumulation is 1). ``None`` when the GPU count is unknown and two
    factors are open. Raises :class:`InputError` naming ``where`` when the values disagree or
    ``total`` is not divisible by the known factors."""
    micro, accum = get(MICRO), get(ACCUM)
    dp, dp_from, gpus_known = data_parallel(get, origin)
    if gpus_known and dp is None:
        raise InputError(where, "the GPU count is not a multiple of tp x pp x cp, so the batch "
                         f"cannot be split into data-parallel replicas (GPUs from {dp_from})",
                         value=total)
    if dp is not None and micro is None and accum is None:
        accum = 1
    if micro is not None and accum is not None and dp is not None:
        product = int(micro) * int(accum) * dp
        if product != total:
            raise InputError(where, f"{total} != micro-batch x accumulation x data-parallel "
                             f"GPUs = {micro} x {accum} x {dp} = {product} (micro from "
                             f"{origin(MICRO) or 'default'}, accumulation from "
                             f"{origin(ACCUM) or 'default'}, GPUs from {dp_from})", value=total)
        return None
    known = {"micro": micro, "accum": accum, "dp": dp}
    missing = [k for k, v in known.items() if v is None]
    if len(missing) != 1:
        return None
    prod = 1
    for v in known.values():
        prod *= int(v) if v is not None else 1
    if total % prod:
        raise InputError(where, f"{total} is not divisible by micro-batch x accumulation x "
                         "data-parallel GPUs known "
                         f"({', '.join(f'{k} {v}' for k, v in known.items() if v)}"
                         f"{f'; GPUs from {dp_from}' if dp_from else ''})", value=total)
    target = {"micro": MICRO, "accum": ACCUM, "dp": DP}[missing[0]]
    return target, total // prod, f"{where} / ({' x '.join(k for k in known if k != missing[0])})"


def unsplit_reason(total: int, where: str) -> str:
    """The ``unresolved`` message of a global batch no GPU count splits yet."""
    return (f"{where}: {total} = micro-batch x accumulation x data-parallel GPUs, and no file "
            "or flag gives the GPU count (--gpus-per-node / --nodes, torchrun --nproc_per_node "
            "/ --nnodes) or both micro-batch and accumulation; the factors it leaves open "
            "keep fmest's defaults")


def _batch_arithmetic(sink: Sink, data: dict, origins: dict, pending: list) -> None:
    """Check or solve each global-batch rule of ``sink`` with the merged files; a rule no GPU
    count splits yet goes to ``pending`` as ``(total, where)`` (the input door solves it with
    the flags, :func:`fmest.inputs.build_job`)."""
    for total, key in sink.train_batch:
        where = f"{sink.name}: {key}"
        pending.append((total, where))
        dp, _from, gpus_known = data_parallel(lambda p: _lookup(data, p), lambda p: "")
        if gpus_known and dp is None:
            continue  # flags may change the GPU count; the input door refuses it if not
        solved = solve_train_batch(total, where, lambda p: _lookup(data, p),
                                   lambda p: origins.get(p, ""))
        if solved is not None:
            target, value, origin = solved
            _put(data, target, value)
            origins[target] = origin


def _validate(data: dict, origins: dict) -> None:
    """Store every value in the type the job holds (the converter's structure hooks, field by
    field), so a bad type names the file and key it came from. Ranges and choices are checked
    once, when :mod:`fmest.inputs` builds the job (naming the file and key too)."""
    from fmest.convert import structure_field, unstructure

    for section, values in data.items():
        paths = [(section, None)] if not isinstance(values, dict) else \
            [(f"{section}.{name}", name) for name in values]
        for path, name in paths:
            value = data[section] if name is None else values[name]
            try:
                typed = structure_field(path, value)
            except InputError as exc:
                origin = origins.get(exc.field)
                if origin is None:
                    raise
                raise exc.at(f"{origin} (-> {exc.field})") from None
            except KeyError:
                continue  # an unknown field: reported when the job is built
            typed = unstructure(typed)
            if name is None:
                data[section] = typed
            else:
                values[name] = list(typed) if isinstance(typed, tuple) else typed


def load_configs(paths: list[str], force_format: str | None = None) -> ConfigMerge:
    """Read ``paths`` in order (later files win) into one :class:`ConfigMerge`.

    ``force_format`` skips detection for the listed files (files they include keep their own
    format). Raises :class:`InputError` naming the file and key for malformed files or values
    and for an inconsistent DeepSpeed ``train_batch_size``.
    """
    if force_format is not None and force_format not in MAPPERS:
        raise InputError("--config-format", "unknown config format", value=force_format,
                         accepted=FORMATS)
    sinks: list[Sink] = []
    seen: set[str] = set()

    def load(path: str, display: str, fmt: Optional[str]) -> None:
        real = os.path.realpath(path)
        if real in seen:
            return
        seen.add(real)
        text = _read(path, display)
        doc = parse_text(display, text)
        fmt = fmt or detect_from_doc(display, doc)
        if fmt is None:
            raise unknown_format(display, doc)
        sink = Sink(display, path, fmt)
        MAPPERS[fmt](doc, sink)
        sinks.append(sink)
        for inc_path, inc_display, inc_fmt in sink.includes:
            load(inc_path, inc_display, inc_fmt)

    for p in paths:
        load(p, p, force_format)

    data: dict = {}
    origins: dict[str, str] = {}
    overridden: list[str] = []
    for s in sinks:
        for fld, (value, key) in s.values.items():
            here = f"{s.name}: {key}"
            before = origins.get(fld)
            if before is not None and not before.startswith(f"{s.name}: "):
                if _lookup(data, fld) != value:
                    overridden.append(f"{before}: overridden by {here} ({fld} = {value!r})")
                else:
                    here += f" (same as {before})"
            _put(data, fld, value)
            origins[fld] = here
    batch_rules: list = []
    for s in sinks:
        _batch_arithmetic(s, data, origins, batch_rules)
    unresolved: dict[str, str] = {}
    for s in sinks:
        for fld, keys in s.autos.items():
            if fld in origins:
                origins[fld] += f" (resolves \"auto\" of {s.name}: {', '.join(keys)})"
                continue
            unresolved[fld] = (f"{s.name}: {', '.join(keys)}: \"auto\" and no other file sets "
                               f"{fld}; fmest's default is used")
        dtype = _lookup(data, "training.dtype")
        if dtype in s.master_keys:
            # DeepSpeed owns the precision policy: low-precision weights + fp32 master copy.
            _put(data, "training.precision", "master")
            origins["training.precision"] = f"{s.name}: {s.master_keys[dtype]}"
    _validate(data, origins)
    ignored = tuple(f"{s.name}: {entry}" for s in sinks for entry in s.ignored) + tuple(
        overridden)
    for total, where in batch_rules:
        if not data_parallel(lambda p: _lookup(data, p), lambda p: "")[2]:
            unresolved[where] = unsplit_reason(total, where)
    not_modelled = tuple(f"{s.name}: {entry}" for s in sinks for entry in s.not_modelled)
    return ConfigMerge(data=data, origins=dict(sorted(origins.items())), ignored=ignored,
                       not_modelled=not_modelled,
                       unresolved=unresolved, files=tuple((s.name, s.format) for s in sinks),
                       batch_rules=tuple(batch_rules))


def merge_into(base: dict, overlay: dict) -> dict:
    """Overlay a job dict on another section by section (``overlay`` wins); returns ``base``."""
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key].update(value)
        else:
            base[key] = dict(value) if isinstance(value, dict) else value
    return base


__all__ = ["ConfigMerge", "FORMATS", "data_parallel", "detect_format", "load_configs",
           "merge_into", "parse_text", "solve_train_batch", "unsplit_reason"]
