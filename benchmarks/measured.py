"""Published measurements (shared/data/measured_dev.csv) as fmest jobs.

Public API (reused by the memory and time benchmarks):

* :func:`load_rows` ``(kind=None) -> list[dict]``: the CSV rows (all, or one ``kind``:
  ``memory``, ``throughput``, ``total_time``). The path is ``$FMEST_MEASURED_CSV`` or
  ``../shared/data/measured_dev.csv`` relative to the repository root.
* :func:`row_to_job` ``(row) -> (job_dict or None, reason)``: the fmest job dict
  (:func:`fmest.convert.job_from_dict` input) for a row, or ``None`` and why it cannot be
  expressed. ``reason`` is ``""`` for supported rows.
* :func:`jobs` ``(kind=None) -> list[(row, job_dict or None, reason)]``.

Mapping rules (each inference is stated; none is tuned per row):

* model -> preset by name (``find_preset``; ``meta-llama/Llama-3.2-3B-Instruct`` -> the
  Llama-3.2-3B preset, ``MPT-7B (...)`` -> ``mpt-7b``); unknown architectures are unsupported.
* gpu -> the gpus.csv row of that part; ``H100-96GB`` -> ``H100-SXM-96GB``; rows naming only a
  capacity map to a GPU of that capacity (only the capacity matters for memory).
* dtype ``bf16+float8``/``fp8 (...)`` -> ``fp8``; ``bf16 (amp)`` -> precision ``amp``;
  ``bf16 (pure)`` -> ``pure``; torchtune and PEFT-benchmark rows train in pure bf16 (their
  recipes load the model in bf16 with no autocast) -> precision ``pure`` (LoRA rows of
  torchtune too: torchtune keeps adapters in bf16; PEFT LoRA keeps the ``auto`` rule).
* ``zero_or_fsdp``: ``fsdp`` -> ``fsdp: full_shard``; ``1``/``2``/``3`` -> ``zero_stage``.
* torchtitan rows: TP is always sequence-parallel (torchtitan's TP plan shards norms over the
  sequence); PP micro-batches default to the total number of stages (torchtitan
  ``build_pipeline_schedule``: ``num_total_stages = pipeline_parallel_degree * len(stages)``;
  ``if n_microbatches is None: n_microbatches = num_total_stages``); "Interleaved 1F1B" uses 2
  virtual stages per rank (a looped schedule builds 2 stages per rank), so 1F1B gets
  ``micro_batch = local batch / pp`` and ``grad_accum = pp``, interleaved ``local / (2 pp)``
  and ``2 pp``.
* torchtune rows: ``compile`` (also written ``packed, compile, ...``)/``chunked CE``/``activation offloading``/``optimizer_in_bwd``
  flags from the ladder text; torch AdamW runs fused (the LoRA row states ``fused=True``; the
  8-bit row uses bitsandbytes AdamW8bit).
* unsloth boundary rows: QLoRA on all linear layers; gradient checkpointing assumed on (the HF
  baseline does not state it; without it 28k tokens could not fit an 80 GB GPU).
* ``flash_attention``: true -> ``flash``, false -> ``eager``, unknown -> ``sdpa``.
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path
from typing import Optional

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CSV = REPO_ROOT.parent / "shared" / "data" / "measured_dev.csv"

_GPU_RULES = (
    (r"H100-96GB", "H100-SXM-96GB"),
    (r"H100-80GB|H100 80GB|H100-SXM", "H100-SXM-80GB"),
    (r"A100-40GB", "A100-SXM-40GB"),
    (r"A100", "A100-SXM-80GB"),
    (r"L40S", "L40S-48GB"),
    (r"^80GB GPU", "A100-SXM-80GB"),
    (r"^24GB GPU", "RTX4090-24GB"),
)

_TORCHTUNE_LORA_TARGETS = ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def csv_path() -> Path:
    return Path(os.environ.get("FMEST_MEASURED_CSV") or DEFAULT_CSV)


def load_rows(kind: Optional[str] = None) -> list[dict]:
    """Rows of the measured CSV (optionally only those of ``kind``), as dicts of strings."""
    with open(csv_path(), newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return [r for r in rows if kind is None or r["kind"] == kind]


def _int(v: str, default: Optional[int] = None) -> Optional[int]:
    v = (v or "").strip()
    if not v:
        return default
    try:
        return int(float(v))
    except ValueError:
        return default


def _model(row) -> tuple[Optional[str], str]:
    from fmest.models.presets import find_preset

    raw = row["model"].strip()
    for cand in (raw, raw.split(" (")[0].strip()):
        hit = find_preset(cand)
        if hit:
            return hit, ""
    return None, f"no preset for model {raw!r}"


def _gpu(row) -> tuple[Optional[str], str]:
    g = row["gpu"]
    for pat, name in _GPU_RULES:
        if re.search(pat, g):
            return name, ""
    return None, f"no GPU mapping for {g!r}"


def row_to_job(row: dict) -> tuple[Optional[dict], str]:
    """The fmest job dict for one CSV row, or ``(None, reason)`` (see module doc)."""
    model, why = _model(row)
    if model is None:
        return None, why
    gpu, why = _gpu(row)
    if gpu is None:
        return None, why
    other = row.get("other", "")
    low = other.lower()
    rid = row["id"]
    titan = rid.startswith("titan") or "torchtitan" in low
    torchtune = rid.startswith("tt") or "torchtune" in low
    peftbench = rid.startswith("peftmmqa")

    dtype_raw = (row["dtype"] or "bf16").strip().lower()
    training: dict = {}
    if "float8" in dtype_raw or dtype_raw.startswith("fp8"):
        training["dtype"] = "fp8"
    elif dtype_raw.startswith("fp16"):
        training["dtype"] = "fp16"
    elif dtype_raw.startswith("fp32"):
        training["dtype"] = "fp32"
    else:
        training["dtype"] = "bf16"
    if "(amp)" in dtype_raw:
        training["precision"] = "amp"
    elif "(pure)" in dtype_raw or ((torchtune or peftbench) and row["technique"] == "full"):
        training["precision"] = "pure"
    elif torchtune:
        training["precision"] = "pure"

    tech = (row["technique"] or "full").strip()
    if tech not in ("full", "lora", "qlora"):
        return None, f"technique {tech!r}"
    training["technique"] = tech
    if tech != "full":
        training["lora_rank"] = _int(row["lora_rank"], 16)
        if torchtune:
            training["lora_target_modules"] = list(_TORCHTUNE_LORA_TARGETS)
        elif rid.startswith("unsloth"):
            training["lora_target_modules"] = list(_ALL_LINEAR)
        elif "q_proj,v_proj" in other or "q,v" in low:
            training["lora_target_modules"] = ["q_proj", "v_proj"]

    opt = row["optimizer"].lower()
    if ("8-bit" in opt or "8bit" in opt) and "non-8-bit" not in opt:
        training["optimizer"] = "adamw_8bit"
    elif "sgd" in opt:
        training["optimizer"] = "sgd_momentum"
    else:
        training["optimizer"] = "adamw"
        if "fused=true" in opt or torchtune:
            training["optimizer_impl"] = "fused"
    if "optimizer_in_bwd=true" in opt:
        training["optimizer_in_backward"] = True

    seq = _int(row["seq_len"])
    if seq is None:
        return None, "sequence length not stated"
    training["seq_len"] = seq
    dp, tp, pp, cp = (_int(row[k], 1) for k in ("dp", "tp", "pp", "cp"))
    par: dict = {"dp": dp, "tp": tp, "pp": pp, "cp": cp}
    mb = _int(row["micro_batch"])
    ga = _int(row["grad_accum"], 1)
    if mb is None:
        m = re.search(r"local bs (\d+)", low)
        if m is None:
            return None, "micro-batch size not stated"
        local = int(m.group(1))
        if pp > 1:   # torchtitan default: as many micro-batches as stages in total
            stages = pp * (2 if "interleaved" in low else 1)
            mb, ga = max(1, local // stages), stages
        else:
            mb = local
    training["micro_batch_size"] = mb
    training["grad_accum_steps"] = ga or 1
    if pp > 1:
        if "interleaved" in low:
            par["pp_schedule"] = "interleaved"
            par["pp_virtual_stages"] = 2
        elif "gpipe" in low:
            par["pp_schedule"] = "gpipe"
    if tp > 1 and titan:
        par["sequence_parallel"] = True

    zf = (row["zero_or_fsdp"] or "").strip().lower()
    if zf == "fsdp":
        par["fsdp"] = "full_shard"
    elif zf in ("1", "2", "3"):
        par["zero_stage"] = int(zf)

    ac = (row["activation_checkpointing"] or "").strip().lower()
    if ac in ("full", "selective"):
        training["activation_checkpointing"] = ac
    elif not ac and rid.startswith("unsloth"):
        training["activation_checkpointing"] = "full"
    fa = (row["flash_attention"] or "").strip().lower()
    training["attention"] = {"true": "flash", "false": "eager"}.get(fa, "sdpa")

    if re.search(r"torch\.compile|\+ ?compile|compile \+|compile true|, compile,", low) \
            and "compile off" not in low:
        training["compile"] = True
    if "chunked ce" in low or "cewithchunkedoutputloss" in low:
        training["loss"] = "chunked"
    if "activation offloading" in low and "no activation offloading" not in low:
        training["activation_offload"] = True

    num = _int(row["num_gpus"], 1) or 1
    world = dp * tp * pp * cp
    if world != num:
        return None, f"dp*tp*pp*cp = {world} != num_gpus {num}"
    hardware = {"gpu": gpu, "nodes": max(1, num // 8) if num % 8 == 0 else 1}
    return {"model": model, "training": training, "parallelism": par,
            "hardware": hardware}, ""


def jobs(kind: Optional[str] = None) -> list[tuple[dict, Optional[dict], str]]:
    """``(row, job_dict or None, reason)`` for every row of ``kind``."""
    out = []
    for row in load_rows(kind):
        try:
            job, why = row_to_job(row)
        except Exception as exc:  # a malformed row is reported, not fatal
            job, why = None, f"{type(exc).__name__}: {exc}"
        out.append((row, job, why))
    return out
