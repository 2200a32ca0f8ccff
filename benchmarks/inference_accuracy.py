"""Accuracy of fmest's inference model on published serving figures.

Reads the evidence rows of kinds ``inference_memory`` and ``inference_throughput`` from
``benchmarks/data/parts/inference.csv`` (sources: ``benchmarks/data/parts/inference_SOURCES.md``),
predicts each with the inference formulas of the memory_theory and time_roofline plugins
(``fmest_memory_theory.inference``, ``fmest_time_roofline.inference``), and prints the absolute
percentage error per source and kind (median, p90) and overall.

One constant is fitted to these rows: the fixed time of a decode step per serving runtime
(``DECODE_STEP_OVERHEAD_S`` in ``fmest_time_roofline.inference``: scheduler, sampler, Python), the
median over a runtime's throughput rows of (measured step time - modelled kernel time). The
table therefore has a leave-one-source-out line: each source's throughput rows predicted with the
overhead fitted on the other sources of the same runtime only. Memory rows fit nothing.

Run: ``python benchmarks/inference_accuracy.py`` (``--rows`` prints every row; ``--fit`` prints
the fitted overheads to paste into the constant).
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from pathlib import Path

import attrs

from fmest.gpus import shipped_gpus
from fmest.models.aliases import alias_loader
from fmest.models.local import _ShippedPresets
from fmest.models.presets import find_preset, load_preset
from fmest_memory_theory.inference import (
    GIB,
    ServingSetup,
    ShardPlan,
    inference_memory,
    kv_bytes_per_token_per_layer,
    weight_bytes_per_gpu,
)
from fmest_time_roofline.inference import DECODE_STEP_OVERHEAD_S, GpuRates, inference_time

CSV_PATH = Path(__file__).resolve().parent / "data" / "parts" / "inference.csv"
#: transformers computes logits for the last prompt token only in generate() from 4.45
#: (``num_logits_to_keep``); earlier versions compute them for every prompt token.
LAST_TOKEN_LOGITS_FROM = (4, 45)


def _fields(other: str) -> dict:
    out = {}
    for part in other.split(";"):
        if "=" in part:
            key, value = part.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def _model(name: str):
    if find_preset(name):
        return load_preset(name)
    loader = alias_loader(name, _ShippedPresets())
    if loader is None:
        raise LookupError(f"no preset or alias for {name}")
    return loader()


def _transformers_version(stack_version: str) -> tuple[int, int]:
    hit = re.search(r"transformers (\d+)\.(\d+)", stack_version)
    return (int(hit.group(1)), int(hit.group(2))) if hit else (99, 0)


def runtime_of(row: dict) -> str:
    return "tensorrt-llm" if row["stack"] == "tensorrt-llm" else "vllm"


def predict(row: dict, overheads: dict | None = None) -> float:
    """The prediction for one row, in the row's unit (``overheads``: runtime -> fixed decode
    step seconds, default the shipped ``DECODE_STEP_OVERHEAD_S``)."""
    overheads = DECODE_STEP_OVERHEAD_S if overheads is None else overheads
    timing = _timing(row, overheads)
    if row["kind"] == "inference_memory":
        return timing
    if row["unit"] == "ttft_ms":
        return timing.prefill_seconds * 1000.0
    per_job = timing.output_tokens_per_s
    return per_job / timing.gpus if row["unit"] == "tokens_per_sec_per_gpu" else per_job


def _timing(row: dict, overheads: dict):
    info = _fields(row["other"])
    model = _model(row["model"])
    gpu = next(g for g in shipped_gpus() if g.name == row["gpu"])
    batch, tp = int(row["micro_batch"]), int(row["tp"] or 1)
    prompt, output = int(info["input_len"]), int(info["output_len"])
    weights = {"int8": "int8", "gptq": "gptq", "awq": "awq", "fp8": "fp8"}.get(
        info["weights"], "bf16")
    kv_format = {"fp8": "fp8"}.get(info.get("kv", ""), "bf16")
    if row["kind"] == "inference_memory":
        runtime = "transformers" if info["runtime"].startswith("transformers") else "vllm"
        legacy = _transformers_version(row["stack_version"]) < LAST_TOKEN_LOGITS_FROM
        setup = ServingSetup(batch=batch, context=prompt + output, prompt_tokens=prompt,
                             weight_format=weights, kv_format=kv_format, runtime=runtime,
                             shard=ShardPlan(tp=tp))
        if runtime == "transformers" and not legacy:
            setup = attrs.evolve(setup, runtime="vllm", block_tokens=1, chunk_tokens=prompt,
                                 cuda_graphs=False)
        mem = inference_memory(model, setup, capacity_bytes=gpu.memory_bytes)
        allocated = mem.total_bytes - mem.non_torch_bytes
        return allocated / GIB  # the sources' "GB" are GiB (inference_SOURCES.md)
    dtype = "fp8" if row["dtype"] == "fp8" else "bf16"
    rates = GpuRates(name=gpu.name, hbm_bytes_per_s=gpu.hbm_bytes_per_s,
                     peak_flops_per_s=(gpu.fp8_flops_per_s if dtype == "fp8"
                                       else gpu.bf16_flops_per_s),
                     link_bytes_per_s=gpu.intra_node_bytes_per_s or 0.0)
    shard = ShardPlan(tp=tp)
    weight_bytes = weight_bytes_per_gpu(model, weights, shard=shard)
    kv_per_token = kv_bytes_per_token_per_layer(model, 1.0 if kv_format == "fp8" else 2.0,
                                                tp=tp) * model.num_decoder_layers
    return inference_time(model, batch=batch, prompt_tokens=prompt, output_tokens=output,
                          weights_bytes_per_gpu=weight_bytes,
                          kv_bytes_per_token_per_gpu=kv_per_token, tp=tp, pp=1, gpus=tp,
                          rates=rates, dtype=dtype,
                          step_overhead_s=overheads.get(runtime_of(row), 0.0))


def step_residual_s(row: dict) -> float | None:
    """Measured decode step time less the modelled one without a fixed overhead (throughput
    rows in tokens/s only)."""
    if row["kind"] != "inference_throughput" or row["unit"] == "ttft_ms":
        return None
    timing = _timing(row, {})
    measured = float(row["measured_value"]) * (timing.gpus if row["unit"] ==
                                               "tokens_per_sec_per_gpu" else 1)
    step = (timing.batch * timing.output_tokens / measured - timing.prefill_seconds) \
        / timing.output_tokens
    return step - timing.decode_step_seconds


def fit_overheads(rows: list[dict]) -> dict:
    """runtime -> median step residual over ``rows`` (not below zero)."""
    by_runtime: dict[str, list[float]] = {}
    for row in rows:
        residual = step_residual_s(row)
        if residual is not None:
            by_runtime.setdefault(runtime_of(row), []).append(residual)
    return {rt: max(0.0, statistics.median(vals)) for rt, vals in by_runtime.items()}


def leave_one_source_out(rows: list[dict]) -> dict[str, list[float]]:
    """Throughput errors of each source with the step overhead fitted on the other sources."""
    out: dict[str, list[float]] = {}
    sources = sorted({r["source"] for r in rows if r["kind"] == "inference_throughput"})
    for source in sources:
        fitted = fit_overheads([r for r in rows if r["source"] != source])
        for row in rows:
            if row["source"] != source or row["kind"] != "inference_throughput":
                continue
            if runtime_of(row) not in fitted and row["unit"] != "ttft_ms":
                continue  # no other source of this runtime to fit on
            measured = float(row["measured_value"])
            out.setdefault(source, []).append(
                abs(predict(row, fitted) - measured) / measured * 100.0)
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true", help="print every row")
    parser.add_argument("--fit", action="store_true",
                        help="print the per-runtime decode step overheads fitted on all rows")
    args = parser.parse_args(argv)
    with open(CSV_PATH, newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["kind"].startswith("inference_")]
    if args.fit:
        print({rt: round(v, 5) for rt, v in sorted(fit_overheads(rows).items())})
    groups: dict[tuple[str, str], list[float]] = {}
    failed = []
    for row in rows:
        try:
            predicted = predict(row)
        except (LookupError, KeyError, StopIteration, ValueError) as exc:
            failed.append((row["id"], f"{type(exc).__name__}: {exc}"))
            continue
        measured = float(row["measured_value"])
        err = abs(predicted - measured) / measured * 100.0
        groups.setdefault((row["source"], row["kind"]), []).append(err)
        groups.setdefault(("ALL", row["kind"]), []).append(err)
        if args.rows:
            print(f"{row['id']:70s} {measured:>10.2f} {predicted:>10.2f} {err:6.1f}%")
    print(f"{'source':34s} {'kind':22s} {'n':>4s} {'median|%|':>10s} {'p90|%|':>8s}")
    for (source, kind), errs in sorted(groups.items(), key=lambda kv: (kv[0][0] == "ALL", kv[0])):
        print(f"{source:34s} {kind:22s} {len(errs):4d} {statistics.median(errs):10.1f} "
              f"{_pct(errs, 0.9):8.1f}")
    loso = leave_one_source_out(rows)
    for source, errs in sorted(loso.items()):
        print(f"{'LOSO ' + source:34s} {'inference_throughput':22s} {len(errs):4d} "
              f"{statistics.median(errs):10.1f} {_pct(errs, 0.9):8.1f}")
    every = [e for errs in loso.values() for e in errs]
    if every:
        print(f"{'LOSO ALL':34s} {'inference_throughput':22s} {len(every):4d} "
              f"{statistics.median(every):10.1f} {_pct(every, 0.9):8.1f}")
    for row_id, why in failed:
        print(f"not scored: {row_id}: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
