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

**fm-training-estimator data** (foundation-model-stack/fm-training-estimator,
``fm_training_estimator/data/README.md``, formats ``v1`` and the xgboost test data):
``model_name, number_gpus, batch_size, seq_len|tokens_per_sample, [gpu_model], [method],
tokens_per_second|train_tokens_per_second, memory, memory_act``. Each row becomes a job:

* ``model_name`` -> ``model`` (a preset, local config or Hub id; unresolvable rows are skipped);
* ``number_gpus`` -> ``hardware.gpus_per_node`` (one node) and, when > 1, ``parallelism.fsdp
  = full_shard`` (fm-training-estimator's hybrid estimator defaults to full_shard on >1 GPU);
* ``batch_size`` -> ``training.micro_batch_size`` (per device); ``seq_len`` or
  ``tokens_per_sample`` -> ``training.seq_len``;
* ``gpu_model`` -> ``hardware.gpu`` (A100 -> A100-80GB, H100 -> H100-SXM, else as given);
* ``method`` -> ``training.technique``; ``torch_dtype`` -> ``training.dtype`` (default fp32,
  FMArguments' default, precision ``pure``);
* ``memory`` (bytes per GPU) -> measured peak; ``tokens_per_second`` (whole job: its
  ``time.get_total_time`` divides dataset tokens by it) -> step seconds =
  ``batch_size x seq_len x number_gpus / tokens_per_second``; ``memory_act`` is not used;
* device is ``cuda`` (they are GPU measurements); ``v2`` rows (``model_arch`` and shape
  columns, no name) lack the vocabulary size and are skipped with that reason.
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


def _fmte_sample(r: dict, path: str, i: int) -> Sample:
    gpus = int(float(r.get("number_gpus") or 1))
    batch = int(float(r["batch_size"]))
    # a row without either length is skipped naming the column it lacks (KeyError)
    seq = int(float(r.get("seq_len") or r["tokens_per_sample"]))
    job: dict[str, Any] = {"model": str(r["model_name"]).strip(),
                           "training": {"micro_batch_size": batch, "seq_len": seq,
                                        "dtype": _FMTE_DTYPES.get(
                                            str(r.get("torch_dtype") or "float32"), "fp32"),
                                        "precision": "pure"},
                           "hardware": {"gpus_per_node": gpus, "nodes": 1}}
    if gpus > 1:
        job["parallelism"] = {"fsdp": "full_shard"}
    if r.get("gpu_model"):
        g = str(r["gpu_model"]).strip()
        job["hardware"]["gpu"] = FMTE_GPUS.get(g.lower().replace("nvidia", "").strip(" -"), g)
    if r.get("method"):
        job["training"]["technique"] = str(r["method"]).strip().lower()
    tps = _float(r.get("tokens_per_second") or r.get("train_tokens_per_second"))
    return Sample(job=job, status="ok", device="cuda", memory_bytes=_float(r.get("memory")),
                  step_seconds=(batch * seq * gpus / tps) if tps else None, source=path, row=i)


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
    elif "model_name" in cols and ("batch_size" in cols):
        fmt = "fm-training-estimator"
        for i, r in enumerate(rows):
            try:
                samples.append(_fmte_sample(r, path, i))
            except (KeyError, TypeError, ValueError) as exc:
                skipped.append(f"row {i + 2}: {type(exc).__name__}: {exc}")
    elif "model_arch" in cols:
        raise InputError(path, "fm-training-estimator v2 (model_arch) rows have no vocabulary "
                         "size, so no job can be built from them; export v1 rows (model_name)")
    elif not rows:
        raise InputError(path, "empty data file")
    else:
        raise InputError(path, "unknown data format (expected an fmest probe dataset with a "
                         "job_json column, or fm-training-estimator rows with model_name, "
                         f"number_gpus, batch_size, seq_len); columns: {sorted(cols)[:12]}")
    return DataFile(path=path, format=fmt, rows=len(rows), sha256=_sha256(path),
                    skipped=tuple(skipped)), samples
