"""Reading training data: fmest probe datasets and fm-training-estimator's CSVs.

**Probe datasets** (CSV or Parquet, one row per configuration): ``job_json`` (the full fmest
job dict as JSON, the source of truth for features), ``status`` (``ok``/``oom``/``error``/
``unsupported``), ``device`` (``cpu``/``cuda``/``fake``), ``measured_peak_bytes`` (allocated
peak), ``measured_reserved_bytes`` and ``measured_step_seconds`` (may be empty), plus
informational columns that are ignored. Two optional columns: ``source`` (the independent
source a row comes from, e.g. the published document: cross-validation then leaves one source
out at a time and training weighs sources equally; it is never a feature) and
``memory_counter`` (``allocated``, the default, ``reserved`` or ``whole``: which counter
``measured_peak_bytes`` read; the baseline is the comparable part of the analytic answer).

**fm-training-estimator data** (foundation-model-stack/fm-training-estimator @ 1d04f05,
``fm_training_estimator/data/README.md`` and ``data/manager.py``: formats ``v1``, ``v2``,
``v3``, and the xgboost test data's variants): the model, given by name (``v1``:
``model_name``) or by six features (``v2``/``v3``: ``model_arch, model_hidden_size,
model_intermediate_size, model_num_attn_heads, model_num_hidden_layers,
model_num_key_value_heads``), then ``[method], [gpu_model], number_gpus, batch_size,
seq_len|tokens_per_sample, tokens_per_second|train_tokens_per_second, memory, memory_act``.
Each row becomes a job:

* ``model_name`` -> ``model`` (a preset, local config or Hub id; unresolvable rows are skipped);
  the features of a ``v2``/``v3`` row -> a shipped preset with exactly those features (and the
  row's ``vocab_size`` when it has that column, which is not part of the formats; without it,
  the vocabulary most such presets share:
  :func:`fmest.compat.fm_training_estimator.model.preset_with_features`), else an inline
  ``model_config`` of those dimensions when the row has ``vocab_size`` (the features lack the
  vocabulary, which the embedding and the output head need), else the row is skipped with
  that reason;
* ``number_gpus`` -> ``hardware.gpus_per_node`` (one node) and, when > 1, ``parallelism.fsdp
  = full_shard`` (fm-training-estimator's hybrid estimator defaults to full_shard on >1 GPU);
* ``batch_size`` -> ``training.micro_batch_size`` (per device); ``seq_len`` or
  ``tokens_per_sample`` -> ``training.seq_len``;
* ``gpu_model`` -> ``hardware.gpu`` (A100 -> A100-80GB, H100 -> H100-SXM, else as given);
  without the column (``v1``, ``v2``) or with an empty cell: A100-80GB, the original's default
  GPU (``InfraArguments.gpuModel = "A100"``, ``gpu_memory_in_gb = 80``), which its estimates
  of such rows assume;
* ``method`` -> ``training.technique``; ``torch_dtype`` -> ``training.dtype`` (default fp32,
  FMArguments' default, precision ``pure``);
* ``memory`` (bytes per GPU) -> measured peak, counter ``whole``: the original's lookup hit
  replaces its whole per-GPU estimate (``get_total_mem_estimate``), so the comparable part of
  fmest's answer is the total, not the allocator's share; ``tokens_per_second`` (whole job: its
  ``time.get_total_time`` divides dataset tokens by it) -> step seconds =
  ``batch_size x seq_len x number_gpus / tokens_per_second``; ``memory_act`` is not used;
* device is ``cuda`` (they are GPU measurements).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
from typing import Any, Optional

from attrs import frozen

from fmest.errors import InputError

PROBE_COLUMNS = ("job_json", "status", "device", "measured_peak_bytes")
MEMORY_COUNTERS = ("allocated", "reserved", "whole")
FMTE_GPUS = {"a100": "A100-80GB", "h100": "H100-SXM", "l40s": "L40S", "v100": "V100-32GB"}
#: The GPU of a row without one: fm-training-estimator's InfraArguments default ``gpuModel =
#: "A100"`` with ``gpu_memory_in_gb = 80`` (config/arguments.py @ 1d04f05).
FMTE_DEFAULT_GPU = FMTE_GPUS["a100"]
_FMTE_DTYPES = {"float32": "fp32", "fp32": "fp32", "float16": "fp16", "fp16": "fp16",
                "bfloat16": "bf16", "bf16": "bf16"}


@frozen(kw_only=True)
class Sample:
    """One measured configuration."""

    job: dict
    status: str
    device: str
    memory_bytes: Optional[float]
    step_seconds: Optional[float]
    source: str
    row: int
    #: the independent source the row comes from (a probe dataset's ``source`` column: the
    #: published document); cross-validation leaves one out at a time and training weighs
    #: sources equally. Empty: no grouping column.
    group: str = ""
    #: which counter ``memory_bytes`` read: ``allocated`` (max_memory_allocated, active
    #: bytes, the CPU allocator's count), ``reserved`` (max_memory_reserved, the caching
    #: allocator's pool) or ``whole`` (nvidia-smi: everything on the device)
    memory_counter: str = "allocated"


@frozen(kw_only=True)
class DataFile:
    path: str
    format: str
    rows: int
    sha256: str
    skipped: tuple[str, ...] = ()


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _rows(path: str) -> list[dict[str, Any]]:
    if path.lower().endswith((".parquet", ".pq")):
        try:
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        except Exception as exc:
            raise InputError(path, f"cannot read Parquet: {type(exc).__name__}: {exc}") from None
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise InputError(path, f"malformed CSV: {exc}") from None


def _float(value: Any) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, str):
        value = value.strip()
        if not value or value.lower() in ("nan", "none", "null"):
            return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def _probe_sample(r: dict, path: str, i: int) -> Sample:
    try:
        job = json.loads(r["job_json"]) if isinstance(r["job_json"], str) else dict(r["job_json"])
    except (TypeError, ValueError) as exc:
        raise InputError(f"{path}: row {i + 2}: job_json", f"malformed JSON: {exc}") from None
    counter = str(r.get("memory_counter") or "allocated").strip().lower()
    if counter not in MEMORY_COUNTERS:
        raise InputError(f"{path}: row {i + 2}: memory_counter", "unknown counter",
                         value=counter, accepted=MEMORY_COUNTERS)
    return Sample(job=job, status=str(r.get("status") or "ok").strip().lower(),
                  device=str(r.get("device") or "cuda").strip().lower(),
                  memory_bytes=_float(r.get("measured_peak_bytes")),
                  step_seconds=_float(r.get("measured_step_seconds")), source=path, row=i,
                  group=str(r.get("source") or "").strip(), memory_counter=counter)


def _whole_feature(r: dict, key: str) -> int:
    """A positive whole-number model feature of a v2/v3 row (``ValueError`` naming the
    column otherwise: the original writes -1 for a feature the config lacks)."""
    text = str(r.get(key) if r.get(key) is not None else "").strip()
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"column {key} is {text!r}, not a number") from None
    if not value.is_integer() or value < 1:
        raise ValueError(f"column {key} is {text!r}, not a model dimension (a whole number "
                         ">= 1; the original writes -1 when the config lacks it)")
    return int(value)


def _fmte_model(r: dict) -> dict[str, Any]:
    """The job's ``model`` (and ``model_config``) of a row: its ``model_name`` (v1), or the
    preset with the features of a v2/v3 row, or those dimensions with the row's
    ``vocab_size``; ``ValueError`` with the reason when neither can be had."""
    if r.get("model_name") not in (None, ""):
        return {"model": str(r["model_name"]).strip()}
    from fmest.compat.fm_training_estimator.model import (
        FEATURE_KEYS,
        architecture_model_type,
        preset_with_features,
    )

    arch = str(r.get("model_arch") or "").strip()
    if not arch:
        raise ValueError("no model_name nor model_arch")
    dims = {k: _whole_feature(r, k) for k in FEATURE_KEYS[1:]}
    vocab = _float(r.get("vocab_size"))
    vocab = vocab if vocab is not None and vocab.is_integer() else None
    preset = preset_with_features({"model_arch": arch, **dims},
                                  None if vocab is None else int(vocab))
    if preset is not None:
        return {"model": preset}
    if vocab is None:
        raise ValueError(f"no shipped preset has the features {arch}, "
                         + ", ".join(f"{k[len('model_'):]}={v}" for k, v in dims.items())
                         + ", and the row has no vocab_size column: the vocabulary size, "
                         "which the embedding and output head need, is unknown")
    config: dict[str, Any] = {
        "architectures": [arch], "hidden_size": dims["model_hidden_size"],
        "intermediate_size": dims["model_intermediate_size"],
        "num_attention_heads": dims["model_num_attn_heads"],
        "num_hidden_layers": dims["model_num_hidden_layers"],
        "num_key_value_heads": dims["model_num_key_value_heads"], "vocab_size": int(vocab)}
    model_type = architecture_model_type(arch)
    if model_type:
        config["model_type"] = model_type
    name = (f"{arch}-h{dims['model_hidden_size']}-l{dims['model_num_hidden_layers']}"
            f"-v{int(vocab)}")
    return {"model": name, "model_config": config}


def _fmte_sample(r: dict, path: str, i: int) -> Sample:
    gpus = int(float(r.get("number_gpus") or 1))
    batch = int(float(r["batch_size"]))
    # a row without either length is skipped naming the column it lacks (KeyError)
    seq = int(float(r.get("seq_len") or r["tokens_per_sample"]))
    job: dict[str, Any] = {**_fmte_model(r),
                           "training": {"micro_batch_size": batch, "seq_len": seq,
                                        "dtype": _FMTE_DTYPES.get(
                                            str(r.get("torch_dtype") or "float32"), "fp32"),
                                        "precision": "pure"},
                           "hardware": {"gpus_per_node": gpus, "nodes": 1,
                                        "gpu": FMTE_DEFAULT_GPU}}
    if gpus > 1:
        job["parallelism"] = {"fsdp": "full_shard"}
    if r.get("gpu_model"):
        g = str(r["gpu_model"]).strip()
        job["hardware"]["gpu"] = FMTE_GPUS.get(g.lower().replace("nvidia", "").strip(" -"), g)
    if r.get("method"):
        job["training"]["technique"] = str(r["method"]).strip().lower()
        if job["training"]["technique"] in ("lora", "qlora"):
            # PeftLoraConfig's defaults (fm_training_estimator/config/arguments.py @ 1d04f05)
            job["training"].update(lora_rank=4, lora_target_modules=["q_proj", "v_proj"])
    tps = _float(r.get("tokens_per_second") or r.get("train_tokens_per_second"))
    return Sample(job=job, status="ok", device="cuda", memory_bytes=_float(r.get("memory")),
                  step_seconds=(batch * seq * gpus / tps) if tps else None, source=path, row=i,
                  memory_counter="whole")


def read_dataset(path: str) -> tuple[DataFile, list[Sample]]:
    """Read one file; the format is recognised by its columns."""
    if not os.path.isfile(path):
        raise InputError(path, "no such data file")
    rows = _rows(path)
    cols = set(rows[0]) if rows else set()
    skipped: list[str] = []
    samples: list[Sample] = []
    if "job_json" in cols:
        fmt = "fmest probes"
        missing = [c for c in PROBE_COLUMNS if c not in cols]
        if missing:
            raise InputError(path, f"probe dataset lacks column {missing[0]!r}",
                             accepted=PROBE_COLUMNS)
        for i, r in enumerate(rows):
            samples.append(_probe_sample(r, path, i))
    elif ("model_name" in cols or "model_arch" in cols) and "batch_size" in cols:
        fmt = "fm-training-estimator"
        for i, r in enumerate(rows):
            try:
                samples.append(_fmte_sample(r, path, i))
            except (KeyError, TypeError, ValueError) as exc:
                skipped.append(f"row {i + 2}: {type(exc).__name__}: {exc}")
    elif not rows:
        raise InputError(path, "empty data file")
    else:
        raise InputError(path, "unknown data format (expected an fmest probe dataset with a "
                         "job_json column, or fm-training-estimator rows: v1 with model_name, "
                         "number_gpus, batch_size, seq_len, or v2/v3 with model_arch and the "
                         f"model features); columns: {sorted(cols)[:12]}")
    return DataFile(path=path, format=fmt, rows=len(rows), sha256=_sha256(path),
                    skipped=tuple(skipped)), samples
