"""Bad-input fuzz: does every bad or contradictory input get a refusal or a warning?

Generates inputs from the flag table (:data:`fmest.flags.JOB_FLAGS`: every row with its parser
and choices), the job schema (:data:`fmest.convert.SECTIONS`), the bounds
(:data:`fmest.bounds.BOUNDS`), hand-written contradictions and mutated training-tool configs
(``tests/data/configs``: axolotl, DeepSpeed, TrainingArguments, EstimateInput, ...), each
labelled bad (meant to be refused or warned about) or valid (an odd but legal value). Each goes
through ``fmest.estimate`` (dicts) or, for flags and config files, ``fmest.cli.main`` in-process,
and is classified:

* **refused** -- :class:`fmest.errors.InputError` / exit 2 on one line naming a field;
* **warned** -- answered, and a warning or ignored-key note names the field, key or value;
* **crash** -- any other exception, a traceback, an exit code not in 0/2/3, a refusal naming
  no field;
* **silent** -- a bad input answered with no refusal and no warning naming it;
* **accepted-valid** / **refused-valid** -- inputs labelled valid (not counted as bad).

Property checks beside it (memory under ZeRO-3/FSDP full_shard must not rise as GPUs are added,
must not fall as micro-batch or sequence grows; LoRA not above full fine-tuning under autocast;
step time not falling as the model grows), with the documented exceptions of
``docs/memory_model.md`` ("Known non-monotonic answers") reported as such.

Seeded and deterministic. Run: python benchmarks/fuzz.py [--seed N] [--count N] [--format json]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import attrs
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "data" / "configs"

REFUSED, WARNED, CRASH, SILENT = "refused", "warned", "crash", "silent"
VALID_OK, VALID_REFUSED = "accepted-valid", "refused-valid"
CLASSES = (REFUSED, WARNED, CRASH, SILENT, VALID_OK, VALID_REFUSED)
#: only the memory answer where time is not the point (keeps a run under a minute)
MEMORY = ("memory",)


@attrs.frozen
class Case:
    """One input: ``payload`` is a job dict (door ``api``), an argv list (``cli``) or a
    ``(relative config path, text, extra argv)`` triple (``config``). ``names`` are what a
    refusal or warning must mention (field paths, flags, config keys, values)."""

    category: str
    label: str
    door: str
    payload: Any
    bad: bool
    names: tuple[str, ...]
    quantities: tuple[str, ...] = MEMORY


@attrs.frozen
class Outcome:
    case: Case
    cls: str
    detail: str


# -- the base jobs a field is fuzzed against ---------------------------------------------------
TRAIN = {"model": "llama-2-7b-hf", "training": {"seq_len": 1024},
         "hardware": {"gpu": "H100"}, "workload": {"dataset_tokens": 1e8}}
BASES: dict[str, dict] = {
    "train": TRAIN,
    "lora": {**TRAIN, "training": {"seq_len": 1024, "technique": "lora"}},
    "qlora": {**TRAIN, "training": {"seq_len": 1024, "technique": "qlora"}},
    "fsdp": {**TRAIN, "parallelism": {"fsdp": "full_shard", "dp": 8}},
    "hsdp": {**TRAIN, "parallelism": {"fsdp": "hybrid_shard", "dp": 16}},
    "pipeline": {**TRAIN, "parallelism": {"pp": 4, "pp_schedule": "interleaved"}},
    "tp": {**TRAIN, "parallelism": {"tp": 2}},
    "moe": {**TRAIN, "model": "mixtral-8x7b-v0.1", "parallelism": {"dp": 8, "zero_stage": 3}},
    "t5": {**TRAIN, "model": "t5-small", "training": {"seq_len": 512}},
    "vlm": {**TRAIN, "model": "qwen2-vl-2b-instruct"},
    "samples": {**TRAIN, "workload": {"num_samples": 100000}},
    "steps": {**TRAIN, "workload": {}},
    "inference": {"model": "llama-2-7b-hf", "mode": "inference", "hardware": {"gpu": "H100"}},
    "multi": {**TRAIN, "parallelism": {"dp": 8, "zero_stage": 1}},
}
#: the base each field is fuzzed against (default ``train``): a field in the setting that uses it
FIELD_BASE = {
    "training.lora_rank": "lora", "training.lora_alpha": "lora",
    "training.lora_target_modules": "lora", "training.quantization_bits": "qlora",
    "training.double_quantization": "qlora", "parallelism.hsdp_shard_size": "hsdp",
    "parallelism.fsdp_backward_prefetch": "fsdp", "parallelism.pp_virtual_stages": "pipeline",
    "parallelism.sequence_parallel": "tp", "parallelism.ep": "moe",
    "training.source_len": "t5", "training.target_len": "t5", "training.image_size": "vlm",
    "training.images_per_sample": "vlm", "training.train_vision_tower": "vlm",
    "workload.num_samples": "samples", "workload.avg_seq_len": "samples",
    "workload.max_steps": "steps", "parallelism.dp": "multi", "parallelism.cpu_offload": "fsdp",
    "parallelism.tp_comm_overlap": "tp", "parallelism.async_tp": "tp",
    "workload.dataset_path": "steps",
}
#: the section every field of which is fuzzed against a base
SECTION_BASE = {"inference": "inference"}
#: fields whose values time, tokens or cost read (answered with every quantity)
TIMED = ("workload.", "pricing.", "options.mfu")


def _job(base: str) -> dict:
    return copy.deepcopy(BASES[base])


def _put(job: dict, path: str, value: Any) -> dict:
    if "." not in path:
        job[path] = value
        return job
    section, name = path.split(".", 1)
    job.setdefault(section, {})
    job[section][name] = value
    return job


# -- what each job field takes --------------------------------------------------------------------
def _field_kinds() -> dict[str, tuple[str, Any]]:
    """path -> (kind, detail): int/float with (low, high, low inclusive), choice with the
    accepted values, bool, name, targets, path."""
    from fmest import job as J
    from fmest.bounds import BOUNDS
    from fmest.convert import SECTIONS

    bounds = {b.path: b.maximum for b in BOUNDS}
    choices = {
        "training.dtype": J.DTYPES, "training.precision": J.PRECISIONS,
        "training.technique": J.TECHNIQUES, "training.quantization_bits": J.QUANT_BITS,
        "training.optimizer_impl": J.OPTIMIZER_IMPLS,
        "training.main_grads_dtype": ("fp32", "compute"),
        "training.activation_checkpointing": J.CHECKPOINTING, "training.attention": J.ATTENTIONS,
        "training.loss": J.LOSSES, "parallelism.pp_schedule": J.PP_SCHEDULES,
        "parallelism.zero_stage": (0, 1, 2, 3), "parallelism.fsdp": J.FSDP_STRATEGIES,
        "parallelism.cpu_offload": J.CPU_OFFLOAD, "parallelism.fsdp_backward_prefetch":
        J.FSDP_PREFETCH, "pricing.price_type": J.PRICE_TYPES, "inference.kv_dtype": J.KV_DTYPES,
        "inference.quantization": J.QUANTIZATIONS, "inference.runtime": J.RUNTIMES}
    names = {"training.optimizer", "training.stack", "hardware.gpu", "options.method",
             "options.learned_model", "pricing.provider", "pricing.region",
             "parallelism.sharding"}
    out: dict[str, tuple[str, Any]] = {}
    for section, cls in SECTIONS.items():
        for a in cls.__attrs_attrs__:
            path = f"{section}.{a.name}"
            kind = str(a.type)
            if path in choices:
                out[path] = ("choice", choices[path])
            elif path in names:
                out[path] = ("name", None)
            elif path == "training.lora_target_modules":
                out[path] = ("targets", None)
            elif path == "workload.dataset_path":
                out[path] = ("path", None)
            elif "bool" in kind:
                out[path] = ("bool", None)
            elif "int" in kind:
                out[path] = ("int", (1, bounds.get(path), True))
            elif "float" in kind:
                low_inclusive = path in ("pricing.startup_overhead_hours",
                                         "pricing.checkpoint_overhead_fraction",
                                         "calibration.fragmentation_gib",
                                         "calibration.misc_overhead_gib",
                                         "calibration.safety_margin")
                high = {"options.mfu": 1.0, "inference.gpu_memory_utilization": 1.0,
                        "calibration.safety_margin": 0.999}.get(path, bounds.get(path))
                out[path] = ("float", (0, high, low_inclusive))
            else:
                out[path] = ("name", None)
    return out


BAD_TYPES = [("a word", "abc"), ("a list", [1]), ("an object", {"a": 1})]


#: fields whose tiny positive value is no value (below one token; a runtime with no memory)
TOKEN_COUNTS = ("workload.dataset_tokens", "workload.avg_seq_len",
                "inference.gpu_memory_utilization")


def _numeric_values(path: str, kind: str, detail) -> list[tuple[str, str, Any, bool]]:
    """(subcategory, label, value, bad) for an int or float field."""
    low, high, low_inclusive = detail
    out = [("types", label, value, True) for label, value in BAD_TYPES]
    out += [("types", "a boolean", True, True)]
    out += [("numbers", "-1", -1, True), ("numbers", "nan", float("nan"), True),
            ("numbers", "inf", float("inf"), True), ("numbers", "-inf", float("-inf"), True),
            ("numbers", "'nan' text", "nan", True),
            ("numbers", "0", 0, kind == "int" or not low_inclusive)]
    if kind == "int":
        out += [("numbers", "1.5", 1.5, True), ("types", "'4' text", "4", False),
                ("numbers", "1e30", 10**30, True)]
    else:
        # below one token is no data; a tiny price, factor or overhead is merely odd
        out += [("numbers", "1e30", 1e30, True),
                ("numbers", "1e-300", 1e-300, path in TOKEN_COUNTS)]
    if high is not None:
        top = int(high) if kind == "int" and float(high).is_integer() else high
        out += [("range", "above the bound", top * 2 if top >= 1 else top + 0.5, True)]
    return out


UNKNOWN = "no-such-thing-xyz"


def _values(path: str, kind: str, detail) -> list[tuple[str, str, Any, bool]]:
    if kind in ("int", "float"):
        return _numeric_values(path, kind, detail)
    if kind == "choice":
        return [("names", "an unknown choice", "bogus", True), ("types", "a list",
                                                                [detail[0]], True),
                ("types", "an object", {"a": 1}, True)]
    if kind == "bool":
        return [("types", "'maybe'", "maybe", True), ("types", "2", 2, True),
                ("types", "a list", [True], True), ("types", "'yes' text", "yes", False)]
    if kind == "name":
        return [("names", "an unknown name", UNKNOWN, True), ("types", "a list", ["x"], True),
                ("types", "an object", {"a": 1}, True),
                ("names", "an empty name", "", True)]
    if kind == "targets":
        return [("names", "an unknown module", ["no_such_proj"], True),
                ("types", "a number", 5, True), ("types", "an object", {"a": 1}, True),
                ("names", "an empty name", [""], True)]
    if kind == "path":
        return [("names", "a missing file", "/nonexistent/fuzz.jsonl", True),
                ("types", "a number", 5, True)]
    return []


def _defaults() -> dict[str, Any]:
    from fmest.convert import SECTIONS

    return {f"{s}.{a.name}": a.default for s, cls in SECTIONS.items()
            for a in cls.__attrs_attrs__}


def schema_cases() -> list[Case]:
    """Every job field with wrong types, bad numbers, out-of-range values and unknown names,
    through the Python API."""
    out = []
    for path, (kind, detail) in _field_kinds().items():
        section = path.split(".")[0]
        base = FIELD_BASE.get(path, SECTION_BASE.get(section, "train"))
        q = ("memory", "time", "tokens", "cost") if path.startswith(TIMED) else MEMORY
        default = _defaults().get(path)
        for sub, label, value, bad in _values(path, kind, detail):
            if label == "'4' text" and isinstance(default, int):
                value = str(default)   # a number as text: legal wherever the number is
            job = _put(_job(base), path, value)
            out.append(Case(category=sub, label=f"{path} = {label}", door="api", payload=job,
                            bad=bad, names=(path,), quantities=q))
    for label, value in (("model", UNKNOWN), ("model", ""), ("model", 7),
                         ("model", "a/b/c/d/e"), ("mode", "serving"), ("mode", 1)):
        out.append(Case(category="names" if isinstance(value, str) else "types",
                        label=f"{label} = {value!r}", door="api",
                        payload=_put(_job("train"), label, value), bad=True, names=(label,)))
    # unknown keys in a job: refused or reported
    for where, key in (("", "bogus_field"), ("training", "seq_length"),
                       ("parallelism", "zero"), ("hardware", "gpus")):
        job = _job("train")
        (job.setdefault(where, {}) if where else job)[key] = 4
        out.append(Case(category="names", label=f"unknown key {where + '.' if where else ''}"
                        f"{key}", door="api", payload=job, bad=True, names=(key,)))
    return out


# -- contradictions --------------------------------------------------------------------------------
def _combo(base: str, label: str, names: tuple[str, ...], bad: bool = True,
           quantities: tuple[str, ...] = MEMORY, **sections) -> Case:
    job = _job(base)
    for section, fields in sections.items():
        if isinstance(fields, dict):
            job.setdefault(section, {}).update(fields)
        else:
            job[section] = fields
    return Case(category="conflicts", label=label, door="api", payload=job, bad=bad,
                names=names, quantities=quantities)


def conflict_cases() -> list[Case]:
    c = _combo
    return [
        c("train", "LoRA rank with full fine-tuning", ("training.lora_rank",),
          training={"lora_rank": 64}),
        c("train", "LoRA alpha with full fine-tuning", ("training.lora_alpha",),
          training={"lora_alpha": 64}),
        c("train", "LoRA target modules with full fine-tuning",
          ("training.lora_target_modules",), training={"lora_target_modules": ["q_proj"]}),
        c("lora", "quantization bits with LoRA", ("training.quantization_bits",),
          training={"quantization_bits": 8}),
        c("lora", "double quantization off with LoRA", ("training.double_quantization",),
          training={"double_quantization": False}),
        c("train", "double quantization off with full fine-tuning",
          ("training.double_quantization",), training={"double_quantization": False}),
        c("train", "zero and fsdp together", ("parallelism.zero_stage", "parallelism.fsdp"),
          parallelism={"zero_stage": 3, "fsdp": "full_shard", "dp": 8}),
        c("train", "tp not dividing the heads", ("parallelism.tp",), parallelism={"tp": 3}),
        c("train", "fp8 on an A100", ("training.dtype",), training={"dtype": "fp8"},
          hardware={"gpu": "A100"}),
        c("train", "flash attention on a V100", ("training.attention",),
          training={"attention": "flash", "dtype": "fp16"}, hardware={"gpu": "V100"}),
        c("train", "GPT-2 past its position table", ("training.seq_len",), model="gpt2",
          training={"seq_len": 4096}),
        c("train", "max_steps with dataset_tokens", ("workload.max_steps",),
          workload={"max_steps": 100}, quantities=("memory", "time")),
        c("samples", "max_steps with num_samples", ("workload.max_steps",),
          workload={"max_steps": 100}, quantities=("memory", "time")),
        c("steps", "max_steps with epochs", ("workload.epochs", "workload.max_steps"),
          workload={"max_steps": 100, "epochs": 3}, quantities=("memory", "time")),
        c("steps", "epochs without a dataset", ("workload.epochs",),
          workload={"epochs": 3}, quantities=("memory", "time")),
        c("samples", "average sample longer than seq_len", ("workload.avg_seq_len",),
          workload={"avg_seq_len": 4096}),
        c("train", "avg_seq_len without num_samples", ("workload.avg_seq_len",),
          workload={"avg_seq_len": 512}, quantities=("memory", "time")),
        c("train", "sequence parallel without tp", ("parallelism.sequence_parallel",),
          parallelism={"sequence_parallel": True}),
        c("train", "CPU offload without sharding", ("parallelism.cpu_offload",),
          parallelism={"cpu_offload": "optimizer"}),
        c("train", "parameter offload with ZeRO-2", ("parallelism.cpu_offload",),
          parallelism={"cpu_offload": "params", "zero_stage": 2, "dp": 8}),
        c("train", "ZeRO-3 with pipeline parallelism", ("parallelism.zero_stage",),
          parallelism={"zero_stage": 3, "pp": 2}),
        c("train", "expert parallelism on a dense model", ("parallelism.ep",),
          parallelism={"ep": 2, "dp": 2}),
        c("moe", "ep not dividing the experts", ("parallelism.ep",),
          parallelism={"ep": 3, "dp": 3}),
        c("train", "more stages than layers", ("parallelism.pp",), parallelism={"pp": 64}),
        c("train", "cp not dividing seq_len", ("parallelism.cp",),
          training={"seq_len": 1000}, parallelism={"cp": 3}),
        c("train", "dp against gpus_per_node x nodes", ("parallelism.dp",),
          parallelism={"dp": 4}, hardware={"gpus_per_node": 8, "nodes": 1, "gpu": "H100"}),
        c("train", "tp above the GPUs", ("parallelism",),
          parallelism={"tp": 8}, hardware={"gpus_per_node": 4, "gpu": "H100"}),
        c("train", "hsdp shard size without hybrid_shard", ("parallelism.hsdp_shard_size",),
          parallelism={"hsdp_shard_size": 4, "fsdp": "full_shard", "dp": 8}),
        c("hsdp", "hsdp shard size not dividing dp", ("parallelism.hsdp_shard_size",),
          parallelism={"hsdp_shard_size": 5}),
        c("train", "fsdp prefetch without fsdp", ("parallelism.fsdp_backward_prefetch",),
          parallelism={"fsdp_backward_prefetch": "post"}),
        c("train", "virtual stages without interleaving", ("parallelism.pp_virtual_stages",),
          parallelism={"pp_virtual_stages": 2, "pp": 2}),
        c("train", "interleaved schedule without pipeline", ("parallelism.pp_schedule",),
          parallelism={"pp_schedule": "interleaved"}),
        c("train", "gpipe schedule without pipeline", ("parallelism.pp_schedule",),
          parallelism={"pp_schedule": "gpipe"}),
        c("train", "optimizer in backward with accumulation",
          ("training.optimizer_in_backward",),
          training={"optimizer_in_backward": True, "grad_accum_steps": 4}),
        c("train", "async TP without tp", ("parallelism.async_tp",),
          parallelism={"async_tp": True}),
        c("train", "TP comm overlap without tp", ("parallelism.tp_comm_overlap",),
          parallelism={"tp_comm_overlap": True}),
        c("multi", "distributed optimizer with ZeRO-3", ("parallelism.distributed_optimizer",),
          parallelism={"distributed_optimizer": True, "zero_stage": 3}),
        c("fsdp", "distributed optimizer with FSDP", ("parallelism.distributed_optimizer",),
          parallelism={"distributed_optimizer": True}),
        c("train", "sharding name against zero_stage", ("parallelism.sharding",),
          parallelism={"sharding": "zero3", "zero_stage": 1, "dp": 8}),
        c("train", "image settings on a text model", ("training.images_per_sample",),
          training={"seq_len": 1024, "images_per_sample": 4}),
        c("train", "image size on a text model", ("training.image_size",),
          training={"seq_len": 1024, "image_size": 448}),
        c("train", "vision tower on a text model", ("training.train_vision_tower",),
          training={"seq_len": 1024, "train_vision_tower": True}),
        c("train", "encoder length on a decoder-only model", ("training.source_len",),
          training={"seq_len": 1024, "source_len": 512}),
        c("train", "decoder length on a decoder-only model", ("training.target_len",),
          training={"seq_len": 1024, "target_len": 128}),
        c("train", "inference settings in training mode", ("inference.batch",),
          inference={"batch": 32}),
        c("train", "inference context in training mode", ("inference.context",),
          inference={"context": 8192}),
        c("inference", "output tokens above the context", ("inference.output_tokens",),
          inference={"context": 1024, "output_tokens": 4096}),
        c("inference", "group size without GPTQ/AWQ", ("inference.group_size",),
          inference={"group_size": 64}),
        # vLLM runs an fp8 KV cache and fp8 weight-only (Marlin) kernels on Ampere: legal
        c("inference", "fp8 KV cache on an A100", ("inference.kv_dtype",),
          inference={"kv_dtype": "fp8"}, hardware={"gpu": "A100"}, bad=False),
        c("inference", "fp8 weights on an A100", ("inference.quantization",),
          inference={"quantization": "fp8"}, hardware={"gpu": "A100"}, bad=False),
        c("train", "dataset file with dataset_tokens", ("workload.dataset_path",),
          workload={"dataset_path": "/nonexistent/fuzz.jsonl"},
          quantities=("memory", "time")),
        c("train", "flat price with a provider", ("pricing.provider",
                                                  "pricing.price_per_gpu_hour"),
          pricing={"provider": "aws", "price_per_gpu_hour": 2.0},
          quantities=("memory", "time", "tokens", "cost")),
        # the cheapest rate in that region over every provider: legal
        c("train", "region without a provider", ("pricing.region",),
          pricing={"region": "us-east-1"}, quantities=("memory", "time", "tokens", "cost"),
          bad=False),
        c("train", "main grads dtype without master precision",
          ("training.main_grads_dtype",), training={"main_grads_dtype": "compute",
                                                    "precision": "amp"}),
        c("lora", "LoRA rank above the hidden size", ("training.lora_rank",),
          training={"lora_rank": 8192}),
        c("train", "gpus_per_node above a node's GPUs", ("hardware.gpus_per_node",),
          hardware={"gpus_per_node": 64, "gpu": "H100"}, bad=False),
        c("train", "seq_len above a rotary model's trained context", ("training.seq_len",),
          training={"seq_len": 65536}, bad=False),
        c("train", "mfu with safety margin", ("options.mfu",), options={"mfu": 0.5},
          bad=False, quantities=("memory", "time")),
    ]


# -- flags ------------------------------------------------------------------------------------------
FLAG_BASE = ["--model", "llama-2-7b-hf", "--seq-len", "1024", "--gpu", "H100"]
FLAG_EXTRA = {"--lora-rank": ["--technique", "lora"], "--lora-alpha": ["--technique", "lora"],
              "--lora-target-modules": ["--technique", "lora"],
              "--quant-bits": ["--technique", "qlora"],
              "--hsdp-shard-size": ["--fsdp", "hybrid_shard", "--dp", "16"],
              "--fsdp-backward-prefetch": ["--fsdp", "full_shard"],
              "--pp-virtual-stages": ["--pp", "4", "--pp-schedule", "interleaved"],
              "--sequence-parallel": ["--tp", "2"], "--ep": ["--model", "mixtral-8x7b-v0.1"],
              "--avg-seq-len": ["--num-samples", "1000"],
              "--source-len": ["--model", "t5-small", "--seq-len", "512"],
              "--target-len": ["--model", "t5-small", "--seq-len", "512"],
              "--image-size": ["--model", "qwen2-vl-2b-instruct"],
              "--images-per-sample": ["--model", "qwen2-vl-2b-instruct"],
              "--cpu-offload": ["--zero", "3"]}


#: flags whose 0 is a legal value (nothing added, no margin)
ZERO_OK = ("--fragmentation-gib", "--misc-overhead-gib", "--safety-margin")


def _flag_values(flag) -> list[tuple[str, str, bool]]:
    """(label, text, bad) for a flag row, from its parser and choices."""
    from fmest import flags as F

    if flag.is_bool:
        return [("'maybe'", "maybe", True), ("'2'", "2", True)]
    if flag.choices:
        return [("an unknown choice", "bogus", True)]
    if flag.parse is F.parse_positive_int:
        return [("0", "0", True), ("-3", "-3", True), ("1.5", "1.5", True), ("abc", "abc", True),
                ("nan", "nan", True), ("1e30", "1e30", True)]
    if flag.parse in (float, F.parse_count):
        return [("-1", "-1", True), ("nan", "nan", True), ("inf", "inf", True),
                ("1e30", "1e30", True), ("abc", "abc", True),
                ("0", "0", flag.name not in ZERO_OK)]
    if flag.parse is int:
        return [("abc", "abc", True), ("-1", "-1", True)]
    if flag.name in ("--model", "--gpu", "--optimizer", "--stack", "--method", "--provider",
                     "--sharding", "--learned-model", "--region"):
        return [("an unknown name", UNKNOWN, True)]
    if flag.name == "--grad-checkpoint":
        return [("'maybe'", "maybe", True)]
    if flag.name == "--dataset":
        return [("a missing file", "/nonexistent/fuzz.jsonl", True)]
    if flag.name == "--lora-target-modules":
        return [("an unknown module", "no_such_proj", True)]
    return []


def flag_cases() -> list[Case]:
    from fmest.flags import JOB_FLAGS

    skip = {"--input-file", "--config", "--config-format"}
    out = []
    for flag in JOB_FLAGS:
        if flag.name in skip:
            continue
        extra = list(FLAG_EXTRA.get(flag.name, []))
        if flag.group.startswith("inference"):
            extra += ["--mode", "inference"]
        for label, text, bad in _flag_values(flag):
            argv = ["estimate", *FLAG_BASE, *extra, f"{flag.name}={text}", "--format", "json"]
            out.append(Case(category="flags", label=f"{flag.name} {label}", door="cli",
                            payload=argv, bad=bad,
                            names=(flag.name, flag.path or flag.dest)))
    # flags that set one field two ways, and contradictions spelled as flags
    for argv, names in (
            (["--lora", "--qlora"], ("--qlora",)), (["--lora", "--technique", "full"],
                                                    ("--technique",)),
            (["--flashattn", "--attn", "eager"], ("--attn",)),
            (["--fused-loss", "--loss", "chunked"], ("--loss",)),
            (["--zero", "3", "--fsdp", "full_shard"], ("--zero", "--fsdp")),
            (["--lora-rank", "64"], ("--lora-rank",)),
            (["--dtype", "fp8", "--gpu", "A100"], ("--dtype",)),
            (["--tp", "3"], ("--tp",)),
            (["--max-steps", "10", "--dataset-tokens", "1e9"], ("--max-steps",)),
            (["--dtype", "int8", "--technique", "full"], ("--dtype", "--technique"))):
        out.append(Case(category="flags", label=" ".join(argv), door="cli",
                        payload=["estimate", *FLAG_BASE, *argv, "--format", "json"], bad=True,
                        names=names))
    return out


# -- config files ----------------------------------------------------------------------------------
#: (config file, key path, value, bad, what a refusal/warning must name)
CONFIG_MUTATIONS: list[tuple[str, tuple, Any, bool]] = []
_NUMERIC_BAD = [(-1, True), (0, True), ("abc", True), (1.5, True), (10**30, True),
                (float("nan"), True)]
for _file, _keys in {
        "axolotl/llama3_qlora.yaml": [("sequence_len",), ("micro_batch_size",), ("lora_r",),
                                      ("gradient_accumulation_steps",), ("num_epochs",)],
        "deepspeed/ds_zero2_offload.json": [("train_micro_batch_size_per_gpu",),
                                            ("gradient_accumulation_steps",),
                                            ("zero_optimization", "stage")],
        "training-args/training_args.json": [("per_device_train_batch_size",),
                                             ("gradient_accumulation_steps",),
                                             ("num_train_epochs",)],
        "torchtune/3B_lora_single_device.yaml": [("batch_size",), ("epochs",),
                                                 ("model", "lora_rank"),
                                                 ("gradient_accumulation_steps",)],
        "llama-factory/llama3_lora_sft.yaml": [("cutoff_len",), ("lora_rank",),
                                               ("per_device_train_batch_size",)],
        "accelerate/fsdp_config.yaml": [("num_processes",), ("num_machines",)],
}.items():
    for _key in _keys:
        for _value, _bad in _NUMERIC_BAD:
            # a fractional number of epochs is legal (HF num_train_epochs is a float)
            _bad = _bad and not (_value == 1.5 and "epoch" in _key[-1])
            CONFIG_MUTATIONS.append((_file, _key, _value, _bad))
CONFIG_MUTATIONS += [
    ("axolotl/llama3_qlora.yaml", ("adapter",), "bogus", True),
    ("axolotl/llama3_qlora.yaml", ("optimizer",), "bogus_opt", True),
    ("axolotl/llama3_qlora.yaml", ("bf16",), "maybe", True),
    ("axolotl/llama3_qlora.yaml", ("gradient_checkpointing",), "maybe", True),
    ("axolotl/llama3_qlora.yaml", ("sequence_length",), 2048, True),   # a typo of the key
    ("axolotl/llama3_qlora.yaml", ("base_model",), UNKNOWN, True),
    ("axolotl/llama3_qlora.yaml", ("max_steps",), 0, True),
    ("axolotl/llama3_qlora.yaml", ("fp16",), True, True),              # bf16 auto and fp16
    ("axolotl/llama3_qlora.yaml", ("load_in_8bit",), True, True),      # 4 and 8 bit
    ("deepspeed/ds_zero2_offload.json", ("zero_optimization", "stage"), 7, True),
    ("deepspeed/ds_zero2_offload.json", ("zero_optimization", "offload_optimizer", "device"),
     "bogus", True),
    ("deepspeed/ds_zero2_offload.json", ("bf16", "enabled"), "maybe", True),
    ("deepspeed/ds_zero2_offload.json", ("fp16",), {"enabled": True}, True),  # with bf16
    ("deepspeed/ds_zero2_offload.json", ("train_batch_size",), 63, True),
    ("deepspeed/ds_zero2_offload.json", ("zero_optimizaton",), {"stage": 3}, True),   # typo
    ("deepspeed/ds_zero2_offload.json", ("zero_optimization", "offload_param"),
     {"device": "cpu"}, True),                                          # param offload, ZeRO-2
    ("training-args/training_args.json", ("optim",), "bogus_opt", True),
    ("training-args/training_args.json", ("fsdp",), "bogus", True),
    ("training-args/training_args.json", ("fp16",), True, True),       # with bf16 true
    ("training-args/training_args.json", ("gradient_checkpointing",), "maybe", True),
    ("training-args/training_args.json", ("max_steps",), 0, True),
    ("training-args/training_args.json", ("per_device_train_batchsize",), 8, True),  # typo
    ("training-args/training_args.json", ("deepspeed",),
     {"zero_optimization": {"stage": 3}}, True),                        # with fsdp
    ("torchtune/3B_lora_single_device.yaml", ("dtype",), "bogus", True),
    ("torchtune/3B_lora_single_device.yaml", ("model", "_component_"),
     "torchtune.models.nope.nope_7b", True),
    ("llama-factory/llama3_lora_sft.yaml", ("finetuning_type",), "bogus", True),
    ("llama-factory/llama3_lora_sft.yaml", ("model_name_or_path",), UNKNOWN, True),
    ("accelerate/fsdp_config.yaml", ("fsdp_config", "fsdp_sharding_strategy"), 9, True),
    ("accelerate/fsdp_config.yaml", ("mixed_precision",), "bogus", True),
    ("accelerate/fsdp_config.yaml", ("num_processes",), 15, True),      # 15 over 2 machines
    ("axolotl/llama3_qlora.yaml", ("lora_alpha",), 16, False),
    ("training-args/training_args.json", ("per_device_train_batch_size",), 2, False),
]


def _set_path(doc: Any, keys: tuple, value: Any) -> None:
    for key in keys[:-1]:
        doc = doc.setdefault(key, {})
    doc[keys[-1]] = value


def config_cases() -> list[Case]:
    out = []
    for rel, keys, value, bad in CONFIG_MUTATIONS:
        path = CONFIGS / rel
        text = path.read_text()
        doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        _set_path(doc, keys, value)
        new = json.dumps(doc) if path.suffix == ".json" else yaml.safe_dump(doc, sort_keys=False)
        extra = [] if "base_model" in doc or "model_name_or_path" in doc else \
            ["--model", "llama-3.1-8b"]
        if "torchtune" in rel:
            extra = []
        label = f"{rel}: {'.'.join(map(str, keys))} = {value!r}"
        out.append(Case(category="configs", label=label, door="config",
                        payload=(rel, new, extra), bad=bad, names=(str(keys[-1]),
                                                                     ".".join(map(str, keys)))))
    # EstimateInput through the API
    base = json.loads((CONFIGS / "fm-training-estimator" / "estimate_input.json").read_text())
    for keys, value, bad in (
            (("infra", "numGpusPerPod"), 0, False),   # 0: search the GPU count (compat)
            (("infra", "numPods"), -1, True),
            (("infra", "gpuModel"), "bogus", True), (("infra", "gpuMemoryInGb"), 0, True),
            (("infra", "gpuMemoryInGb"), 13, True), (("fm", "max_seq_length"), -1, True),
            (("fm", "max_seq_length"), "abc", True), (("fm", "technique"), "bogus", True),
            (("fm", "base_model_path"), UNKNOWN, True), (("peft_lora", "r"), 0, True),
            (("peft_lora", "r"), "abc", True),
            (("hf_training", "per_device_train_batch_size"), 0, True),
            (("hf_training", "gradient_accumulation_steps"), -2, True),
            (("hf_training", "bf16"), "maybe", True),
            (("peft_lora", "target_modules"), "[no_such_proj]", True),
            (("fm", "technique"), "full", True),          # with a peft_lora block
            (("data", "te_approach"), 7, True),
            (("infra", "numGpusPerPod"), 4, False)):
        doc = copy.deepcopy(base)
        _set_path(doc["job_configs"][0], keys, value)
        out.append(Case(category="estimate_input", label=f"EstimateInput {'.'.join(keys)} = "
                        f"{value!r}", door="api", payload=doc, bad=bad,
                        names=(keys[-1], ".".join(keys))))
    return out


# -- random multi-field mutations -----------------------------------------------------------------
def random_cases(rng: random.Random, n: int) -> list[Case]:
    """``n`` jobs with two or three fields set to bad values at once (every one bad)."""
    kinds = _field_kinds()
    pool = [(path, sub, label, value) for path, (kind, detail) in kinds.items()
            for sub, label, value, bad in _values(path, kind, detail) if bad]
    out = []
    for _ in range(n):
        picks = rng.sample(pool, rng.choice((2, 3)))
        job = _job(rng.choice(("train", "lora", "fsdp", "moe", "inference")))
        for path, _sub, _label, value in picks:
            _put(job, path, value)
        out.append(Case(category="random", label="; ".join(f"{p} = {lab}" for p, _s, lab, _v
                                                            in picks), door="api",
                        payload=job, bad=True, names=tuple(p for p, *_ in picks)))
    return out


def all_cases(seed: int, count: int) -> list[Case]:
    fixed = schema_cases() + conflict_cases() + flag_cases() + config_cases()
    rng = random.Random(seed)
    if count >= len(fixed):
        return fixed + random_cases(rng, count - len(fixed))
    # a smaller run: a stratified sample, every category kept
    by_cat: dict[str, list[Case]] = {}
    for case in fixed:
        by_cat.setdefault(case.category, []).append(case)
    out = []
    for cases in by_cat.values():
        k = max(1, round(len(cases) * count / len(fixed)))
        out += rng.sample(cases, min(k, len(cases)))
    return out


# -- running and classifying --------------------------------------------------------------------------
def _names_it(texts: list[str], names: tuple[str, ...]) -> Optional[str]:
    for text in texts:
        low = text.lower()
        if any(n and n.lower() in low for n in names):
            return text
    return None


def _report_texts(report) -> list[str]:
    texts: list[str] = []
    for r in (report, *getattr(report, "others", ())):
        texts += list(r.warnings)
        if r.input is not None:
            texts += [str(i) for i in r.input.ignored]
            texts += [f"{k}: {v}" for k, v in r.input.unresolved.items()]
    return texts


def _classify_answer(case: Case, texts: list[str], baseline: set[str]) -> Outcome:
    new = [t for t in texts if t not in baseline]
    if not case.bad:
        return Outcome(case, VALID_OK, "")
    hit = _names_it(new, case.names)
    if hit:
        return Outcome(case, WARNED, hit[:160])
    return Outcome(case, SILENT, ("warnings: " + " | ".join(new)[:200]) if new else
                   "answered, no warning")


def _refusal(case: Case, field: str, text: str) -> Outcome:
    if not field:
        return Outcome(case, CRASH, f"refusal names no field: {text[:200]}")
    return Outcome(case, REFUSED if case.bad else VALID_REFUSED, text[:200])


def run_api(case: Case, engine, baseline: set[str]) -> Outcome:
    import fmest
    from fmest.errors import InputError

    try:
        report = fmest.estimate(case.payload, engine=engine, quantities=case.quantities)
    except InputError as exc:
        return _refusal(case, exc.field, str(exc))
    except Exception as exc:  # noqa: BLE001 - a crash is what we count
        return Outcome(case, CRASH, f"{type(exc).__name__}: {exc}"[:300])
    return _classify_answer(case, _report_texts(report), baseline)


def _cli(argv: list[str], engine) -> tuple[Any, str, str]:
    from fmest.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv, engine=engine)
        except SystemExit as exc:
            rc = exc.code
        except Exception as exc:  # noqa: BLE001
            return f"{type(exc).__name__}: {exc}", out.getvalue(), err.getvalue()
    return rc, out.getvalue(), err.getvalue()


def run_cli(case: Case, argv: list[str], engine, baseline: set[str]) -> Outcome:
    rc, out, err = _cli(argv, engine)
    err = err.strip()
    if isinstance(rc, str) or rc not in (0, 2, 3) or "Traceback" in err:
        return Outcome(case, CRASH, f"exit {rc}: {err[-300:]}")
    if rc == 2:
        lines = err.splitlines()
        line = lines[-1] if lines else ""
        one = len(lines) == 1 and line.startswith("fmest: error: ")
        head = line.removeprefix("fmest: error: ").split(": ", 1)[0]
        named = head if one and head and head != line.removeprefix("fmest: error: ") else ""
        if line.startswith("fmest: error: argument ") or "unrecognized arguments" in line:
            named = "argparse"
        return _refusal(case, named if one else "", err)
    try:
        doc = json.loads(out)
    except ValueError:
        return Outcome(case, CRASH, f"exit {rc} without a JSON answer: {out[:200]}")
    docs = doc.get("jobs", [doc]) if isinstance(doc, dict) else []
    texts: list[str] = []
    for d in docs:
        texts += list(d.get("warnings") or [])
        texts += list((d.get("input") or {}).get("ignored") or [])
        texts += [str(u) for u in (d.get("input") or {}).get("unresolved") or []]
    return _classify_answer(case, texts, baseline)


def run_case(case: Case, engine, baseline: set[str], tmp: Path) -> Outcome:
    if case.door == "api":
        return run_api(case, engine, baseline)
    if case.door == "cli":
        return run_cli(case, case.payload, engine, baseline)
    rel, text, extra = case.payload
    path = tmp / rel.replace("/", "__")
    path.write_text(text)
    return run_cli(case, ["estimate", "--config", str(path), *extra, "--format", "json"],
                   engine, baseline)


# -- properties -------------------------------------------------------------------------------------
@attrs.frozen
class Property:
    name: str
    setting: str
    ok: bool
    documented: str
    series: str


def _memory(engine, job: dict):
    import fmest
    from fmest.errors import InputError

    try:
        return fmest.estimate(job, engine=engine, quantities=MEMORY).memory
    except InputError:
        return None


def _mem(engine, job: dict) -> Optional[int]:
    m = _memory(engine, job)
    return m.total_bytes if m is not None else None


#: what a second GPU adds (docs/memory_model.md "Known non-monotonic answers"): the NCCL
#: communicator's buffers, the all-gather buffers of sharded parameters, their allocator share
SECOND_GPU = ("cuda_context", "framework_buffers", "allocator_reserve")


def _step(engine, job: dict) -> Optional[float]:
    import fmest
    from fmest.errors import InputError

    try:
        r = fmest.estimate(job, engine=engine, quantities=("memory", "time"))
    except InputError:
        return None
    return r.time.step_seconds if r.time is not None else None


def _monotone(values: list, rising: bool, tol: float = 1.0) -> bool:
    known = [v for v in values if v is not None]
    pairs = list(zip(known, known[1:], strict=False))
    return all((b >= a - tol) if rising else (b <= a + tol) for a, b in pairs)


PROPERTY_MODELS = ("llama-2-7b-hf", "mixtral-8x7b-v0.1", "gpt2", "t5-small",
                   "qwen2-vl-2b-instruct", "qwen2.5-0.5b", "llama-3.1-8b", "gemma-2-2b")
TRAININGS = ({"seq_len": 512}, {"seq_len": 1024, "activation_checkpointing": "full"},
             {"seq_len": 1024, "precision": "master", "optimizer": "sgd"},
             {"seq_len": 512, "technique": "lora"}, {"seq_len": 512, "technique": "qlora"})


def property_checks(engine, scale: int) -> list[Property]:
    out: list[Property] = []
    models = PROPERTY_MODELS[:max(2, scale)]
    gib = 2**30
    for model in models:
        for training in TRAININGS[:max(2, scale)]:
            base = {"model": model, "training": training, "hardware": {"gpu": "H100"}}
            for shard in ({"zero_stage": 3}, {"fsdp": "full_shard"}):
                answers = [_memory(engine, {**base, "parallelism": {**shard, "dp": n}})
                           for n in (1, 2, 4, 8, 16, 64)]
                series = [a.total_bytes if a is not None else None for a in answers]
                ok = _monotone(series, False)
                doc = ""
                if not ok and _monotone(series[1:], False) and None not in answers[:2]:
                    one, two = answers[0], answers[1]
                    added = sum(two.components.get(k, 0) - one.components.get(k, 0)
                                for k in SECOND_GPU)
                    if two.total_bytes - one.total_bytes <= added + 1:
                        doc = ("documented physics: the second GPU adds the NCCL communicator "
                               "and the all-gather buffers (docs/memory_model.md 'Known "
                               "non-monotonic answers'; tests/test_invariants.py)")
                out.append(Property("memory does not rise with more GPUs (ZeRO-3/FSDP)",
                                    f"{model} {training} {shard}", ok, doc,
                                    " ".join(f"{s / gib:.2f}" if s else "-" for s in series)))
            for key, values in (("micro_batch_size", (1, 2, 4, 8)),
                                ("seq_len", (128, 256, 512, 1024))):
                series = [_mem(engine, {**base, "training": {**training, key: v}})
                          for v in values]
                out.append(Property(f"memory does not fall as {key} grows",
                                    f"{model} {training}", _monotone(series, True), "",
                                    " ".join(f"{s / gib:.2f}" if s else "-" for s in series)))
            if training.get("technique", "full") == "full":
                for precision in ("amp", "master"):
                    t = {**training, "precision": precision}
                    full = _mem(engine, {**base, "training": t,
                                         "parallelism": {"zero_stage": 3, "dp": 4}})
                    lora = _mem(engine, {**base, "training": {
                        **t, "technique": "lora", "lora_target_modules": ["all-linear"]},
                        "parallelism": {"zero_stage": 3, "dp": 4}})
                    ok = full is None or lora is None or lora <= full + 1
                    doc = "" if ok or precision == "amp" else (
                        "documented physics: LoRA all-linear above full fine-tuning without "
                        "autocast (docs/memory_model.md 'Known non-monotonic answers'; "
                        "tests/test_invariants.py)")
                    out.append(Property("LoRA all-linear not above full fine-tuning",
                                        f"{model} {t} zero3 dp4", ok, doc,
                                        f"full {full / gib if full else 0:.2f} lora "
                                        f"{lora / gib if lora else 0:.2f} GiB"))
    families = (("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b"),
                ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-72b"),
                ("llama-2-7b-hf", "llama-2-13b-hf", "llama-2-70b-hf"),
                ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"))
    for family in families[:max(2, scale)]:
        for training in ({"seq_len": 1024}, {"seq_len": 1024, "technique": "lora"}):
            series = [_step(engine, {"model": m, "training": training,
                                     "parallelism": {"zero_stage": 3, "dp": 8},
                                     "hardware": {"gpu": "H100"}}) for m in family]
            out.append(Property("step time does not fall as the model grows",
                                f"{' < '.join(family)} {training}",
                                _monotone(series, True, tol=1e-9), "",
                                " ".join(f"{s:.3f}" if s else "-" for s in series)))
    return out


# -- the benchmark ----------------------------------------------------------------------------------
def run(seed: int = 0, count: int = 1500, properties: bool = True,
        engine=None) -> dict:
    """Run the fuzz; returns the JSON-able result (counts, per category, crashes, silent
    acceptances, property failures)."""
    if engine is None:
        from fmest.engine import Engine

        engine = Engine()
    start = time.perf_counter()
    cases = all_cases(seed, count)
    import fmest

    baseline: set[str] = set()
    for base in BASES.values():
        try:
            baseline |= set(_report_texts(fmest.estimate(base, engine=engine,
                                                         quantities=MEMORY)))
        except Exception:  # noqa: BLE001 - a base that fails is found by its cases
            pass
    with tempfile.TemporaryDirectory() as tmp:
        outcomes = [run_case(c, engine, baseline, Path(tmp)) for c in cases]
    props = property_checks(engine, 8 if count >= 1000 else 2) if properties else []
    totals = Counter(o.cls for o in outcomes)
    per_cat: dict[str, Counter] = {}
    for o in outcomes:
        per_cat.setdefault(o.case.category, Counter())[o.cls] += 1
    bad = sum(1 for o in outcomes if o.case.bad)

    def row(o: Outcome) -> dict:
        return {"category": o.case.category, "input": o.case.label, "door": o.case.door,
                "what happened": o.detail}
    return {
        "seed": seed, "inputs": len(outcomes), "bad_inputs": bad,
        "seconds": round(time.perf_counter() - start, 1),
        "counts": {c: totals.get(c, 0) for c in CLASSES},
        "per_category": {cat: {c: n.get(c, 0) for c in CLASSES}
                         for cat, n in sorted(per_cat.items())},
        "crashes": [row(o) for o in outcomes if o.cls == CRASH],
        "silent": [row(o) for o in outcomes if o.cls == SILENT],
        "refused_valid": [row(o) for o in outcomes if o.cls == VALID_REFUSED],
        "properties": {"checked": len(props), "failed": sum(not p.ok for p in props),
                       "documented": sum(bool(p.documented) for p in props),
                       "undocumented": sum(not p.ok and not p.documented for p in props)},
        "property_failures": [attrs.asdict(p) for p in props if not p.ok],
    }


def _table(result: dict) -> str:
    lines = [f"fmest bad-input fuzz: seed {result['seed']}, {result['inputs']} inputs "
             f"({result['bad_inputs']} meant to be bad), {result['seconds']} s", ""]
    head = f"{'category':<16}" + "".join(f"{c:>16}" for c in CLASSES)
    lines += [head, "-" * len(head)]
    for cat, counts in result["per_category"].items():
        lines.append(f"{cat:<16}" + "".join(f"{counts[c]:>16}" for c in CLASSES))
    lines.append(f"{'total':<16}" + "".join(f"{result['counts'][c]:>16}" for c in CLASSES))
    p = result["properties"]
    lines += ["", f"properties: {p['checked']} checked, {p['failed']} failed "
                  f"({p['documented']} documented physics)"]
    for title, key in (("crashes", "crashes"), ("silent acceptances", "silent"),
                       ("valid inputs refused", "refused_valid")):
        if result[key]:
            lines += ["", f"{title} ({len(result[key])}):"]
            lines += [f"  [{r['category']}] {r['input']} -> {r['what happened']}"
                      for r in result[key]]
    if result["property_failures"]:
        lines += ["", "property failures:"]
        lines += [f"  {f['name']}: {f['setting']}: {f['series']}"
                  + (f" [{f['documented']}]" if f["documented"] else "")
                  for f in result["property_failures"]]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=1500,
                    help="inputs (default 1500; below the fixed set's size, a stratified "
                         "sample of it)")
    ap.add_argument("--format", choices=("table", "json"), default="table")
    ap.add_argument("--no-properties", action="store_true", help="skip the property checks")
    args = ap.parse_args(argv)
    result = run(args.seed, args.count, properties=not args.no_properties)
    print(json.dumps(result, indent=1) if args.format == "json" else _table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
