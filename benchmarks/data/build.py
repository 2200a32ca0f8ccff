"""Build the evidence set: ``benchmarks/data/measured.csv`` and ``benchmarks/data/SOURCES.md``.

Inputs (all in the repository):

* ``benchmarks/data/dev/measured_dev.csv`` + ``dev/SOURCES.md``: the original development rows,
  converted to the issue-11 schema (rules in ``dev/SOURCES.md``).
* ``benchmarks/data/parts/*.csv`` + ``parts/*_SOURCES.md``: the research parts, one per helper.

The schema is ``COLUMNS`` below (issue 11, ``docs/benchmarks.md``). Every row is validated:
unique ids, allowed ``kind`` / ``unit`` / ``measure_type`` values, numeric fields numeric, a
``measured_value`` unless the row is an ``oom`` row, a source id that ``SOURCES.md`` mentions.
Invalid rows are printed with the reason and left out of ``measured.csv`` (``--strict`` makes any
invalid row an error instead). Then the coverage counts are printed.

Run: ``python benchmarks/data/build.py`` (``--check`` validates the existing ``measured.csv``
without writing; ``--strict`` exits 1 on any invalid row).
"""

from __future__ import annotations

import argparse
import collections
import csv
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT_CSV = HERE / "measured.csv"
OUT_SOURCES = HERE / "SOURCES.md"

COLUMNS = ("id,source,kind,model,params_b,gpu,num_gpus,dtype,technique,lora_rank,optimizer,seq_len,"
           "micro_batch,grad_accum,global_batch,dp,tp,pp,cp,ep,zero_or_fsdp,"
           "activation_checkpointing,flash_attention,stack,stack_version,oom,suspect,other,"
           "measured_value,unit,measure_type,source_url,source_quote,date_read").split(",")
KINDS = ("memory", "throughput", "total_time")
UNITS = {
    "memory": ("GiB", "GB"),
    "throughput": ("tokens_per_sec_per_gpu", "tokens_per_sec", "TFLOPs_per_gpu", "MFU_pct",
                   "seconds_per_step", "samples_per_sec"),
    "total_time": ("gpu_hours", "hours"),
}
MEASURE_TYPES = ("max_memory_allocated", "max_memory_reserved", "active_bytes", "nvidia-smi",
                 "unknown")
FLOAT_FIELDS = ("params_b", "measured_value")
INT_FIELDS = ("num_gpus", "lora_rank", "seq_len", "micro_batch", "grad_accum", "global_batch",
              "dp", "tp", "pp", "cp", "ep")
#: Model names (or ``other`` text) that mark a mixture-of-experts model, for the coverage count.
MOE_PATTERN = re.compile(r"mixtral|moe|deepseek-v[23]|-a\d+(\.\d+)?b|a800m|a400m|dbrx|grok|"
                         r"arctic|olmoe|jamba|experts?=|top-?k", re.I)


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def _is_number(text: str, integer: bool) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return not integer or value == int(value)


def row_errors(row: dict, sources_text: str) -> list[str]:
    """Why ``row`` breaks the schema (empty list: valid)."""
    errs = []
    kind = row.get("kind", "")
    if kind not in KINDS:
        return [f"kind {kind!r} not in {KINDS}"]
    if not row.get("id") or row["id"] != row["id"].strip().lower():
        errs.append(f"id {row.get('id')!r} must be non-empty and lowercase")
    if not row.get("source"):
        errs.append("source is empty")
    elif f"{row['source']}" not in sources_text:
        errs.append(f"source {row['source']!r} not described in any SOURCES.md")
    if row.get("unit") not in UNITS[kind]:
        errs.append(f"unit {row.get('unit')!r} not in {UNITS[kind]} for kind {kind}")
    mtype = row.get("measure_type", "")
    if kind == "memory" and mtype not in MEASURE_TYPES:
        errs.append(f"measure_type {mtype!r} not in {MEASURE_TYPES}")
    if kind != "memory" and mtype:
        errs.append(f"measure_type {mtype!r} on a {kind} row (memory rows only)")
    for name in FLOAT_FIELDS + INT_FIELDS:
        text = (row.get(name) or "").strip()
        if text and not _is_number(text, name in INT_FIELDS):
            what = "an integer" if name in INT_FIELDS else "a number"
            errs.append(f"{name} {text!r} is not {what}")
    oom = (row.get("oom") or "").strip().lower()
    if oom not in ("", "true", "false"):
        errs.append(f"oom {row.get('oom')!r} not in ('', 'true')")
    if oom != "true" and not (row.get("measured_value") or "").strip():
        errs.append("measured_value empty on a row that is not oom")
    url = row.get("source_url") or ""
    if not url.startswith("http") and not row["source"].startswith("fmest"):
        errs.append("source_url is not a URL")
    return errs


#: Row kinds of other benchmarks that share ``parts/`` (``benchmarks/inference_accuracy.py``
#: reads ``parts/inference.csv`` itself); left out of the training evidence set.
OTHER_KIND_PREFIXES = ("inference_",)


def gather() -> tuple[list[dict], str, list[str]]:
    """All training rows, the concatenated SOURCES text (of the parts that contribute rows) and
    the problems found (header mismatches)."""
    problems: list[str] = []
    inputs = [HERE / "dev" / "measured_dev.csv"] + sorted((HERE / "parts").glob("*.csv"))
    rows: list[dict] = []
    contributing: set[str] = set()
    skipped = 0
    for path in inputs:
        header, part_rows = read_csv(path)
        other_kinds = [r for r in part_rows if r.get("kind", "").startswith(OTHER_KIND_PREFIXES)]
        skipped += len(other_kinds)
        part_rows = [r for r in part_rows if not r.get("kind", "").startswith(OTHER_KIND_PREFIXES)]
        if not part_rows:
            continue
        contributing.add(path.stem)
        if header != COLUMNS:
            missing = [c for c in COLUMNS if c not in header]
            extra = [c for c in header if c not in COLUMNS]
            problems.append(f"{path.name}: header differs from the schema (missing {missing}, "
                            f"extra {extra}, or order)")
            if missing:
                continue
        for row in part_rows:
            row["_file"] = path.name
        # serving rows (issue 14) are scored by benchmarks/inference_accuracy.py, not merged here
        rows += [r for r in part_rows if not r.get("kind", "").startswith("inference_")]
    texts = [("dev/SOURCES.md", (HERE / "dev" / "SOURCES.md").read_text(encoding="utf-8"))]
    for path in sorted((HERE / "parts").glob("*_SOURCES.md")):
        if path.name[: -len("_SOURCES.md")] in contributing:
            texts.append((f"parts/{path.name}", path.read_text(encoding="utf-8")))
    if skipped:
        kinds = ", ".join(f"{prefix}*" for prefix in OTHER_KIND_PREFIXES)
        print(f"left out {skipped} rows of other benchmarks' kinds ({kinds}: "
              "benchmarks/inference_accuracy.py reads them)")
    body = "\n\n".join(f"<!-- from benchmarks/data/{name} -->\n\n{text.strip()}\n"
                       for name, text in texts)
    return rows, body, problems


def validate(rows: list[dict], sources_text: str) -> tuple[list[dict], list[str]]:
    """(valid rows, one message per invalid row). Duplicate ids keep the first row."""
    good, bad, seen = [], [], set()
    for row in rows:
        errs = row_errors(row, sources_text)
        if row.get("id") in seen:
            errs.append("duplicate id")
        if errs:
            bad.append(f"{row.get('_file', '?')}: {row.get('id')}: " + "; ".join(errs))
            continue
        seen.add(row["id"])
        good.append(row)
    return good, bad


def is_moe(row: dict) -> bool:
    return bool(MOE_PATTERN.search(row.get("model", "")) or
                re.search(r"\bmoe\b|num_experts|experts=", row.get("other", ""), re.I))


def counts(rows: list[dict]) -> dict:
    """The coverage counts issue 11 asks for."""
    gpus = [int(float(r["num_gpus"])) for r in rows if (r.get("num_gpus") or "").strip()]
    mem = [r for r in rows if r["kind"] == "memory"]
    return {
        "rows": len(rows),
        "sources": len({r["source"] for r in rows}),
        "memory rows": len(mem),
        "memory rows with counter": sum(r["measure_type"] != "unknown" for r in mem),
        "memory rows, counter unknown (reason in other)": sum(r["measure_type"] == "unknown"
                                                             for r in mem),
        "throughput rows": sum(r["kind"] == "throughput" for r in rows),
        "total_time rows": sum(r["kind"] == "total_time" for r in rows),
        "stacks": dict(collections.Counter(r["stack"] or "(empty)" for r in rows).most_common()),
        "gpus": dict(collections.Counter(r["gpu"] for r in rows).most_common()),
        "techniques": dict(collections.Counter(r["technique"] or "(empty)"
                                               for r in rows).most_common()),
        "gpu count range": f"{min(gpus)}..{max(gpus)}" if gpus else "-",
        "moe rows": sum(is_moe(r) for r in rows),
        "fp8 rows": sum("fp8" in r["dtype"] or "float8" in r["dtype"] for r in rows),
        "oom rows": sum((r.get("oom") or "").lower() == "true" for r in rows),
        "suspect rows": sum(bool((r.get("suspect") or "").strip()) for r in rows),
    }


def print_counts(info: dict) -> None:
    width = max(len(k) for k in info)
    for key, value in info.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items()) + f"  ({len(value)} distinct)"
        print(f"{key:<{width}}  {value}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="validate benchmarks/data/measured.csv as it is; write nothing")
    ap.add_argument("--strict", action="store_true", help="exit 1 on any invalid row")
    args = ap.parse_args(argv)
    if args.check:
        header, rows = read_csv(OUT_CSV)
        problems = [] if header == COLUMNS else ["measured.csv: header differs from the schema"]
        sources_text = OUT_SOURCES.read_text(encoding="utf-8")
    else:
        rows, sources_text, problems = gather()
    good, bad = validate(rows, sources_text)
    for msg in problems + bad:
        print("invalid:", msg, file=sys.stderr)
    if not args.check:
        with open(OUT_CSV, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, COLUMNS, extrasaction="ignore", lineterminator="\n")
            writer.writeheader()
            writer.writerows(good)
        OUT_SOURCES.write_text(
            "# Evidence set: sources\n\nGenerated by `python benchmarks/data/build.py` from "
            "`benchmarks/data/dev/SOURCES.md` and `benchmarks/data/parts/*_SOURCES.md`; edit "
            "those, not this file. Rows: `benchmarks/data/measured.csv`.\n\n" + sources_text,
            encoding="utf-8")
        print(f"wrote {OUT_CSV.relative_to(HERE.parent.parent)} ({len(good)} rows; "
              f"{len(bad)} invalid rows left out)")
    print_counts(counts(good))
    return 1 if args.strict and (bad or problems) else 0


if __name__ == "__main__":
    sys.exit(main())
