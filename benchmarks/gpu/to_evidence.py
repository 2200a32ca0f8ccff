"""Turn a folder of ``memory_probe.py`` results into an evidence-set part.

    python benchmarks/gpu/to_evidence.py benchmarks/gpu/results/H200-SXM-141GB-2026-11-27 \
        --package-version bitsandbytes=0.50.2 > benchmarks/data/parts/gpu_probe.csv

Reads every ``memory_probe_*.csv`` of the folder (a later file's row replaces an earlier one with
the same id) and writes the rows in ``benchmarks/data/build.py``'s column order, with three
rules, each stated in ``benchmarks/data/parts/gpu_probe_SOURCES.md``:

* LoRA / QLoRA rows without a ``precision=`` note get ``precision=pure``: the probe builds the
  model in bf16 and calls ``get_peft_model`` without ``torch.autocast``, and PEFT keeps the
  adapters in fp32 (``autocast_adapter_dtype=True``). Probes written after this script already
  say so.
* The tokens/s row of the case that recorded the allocator history (``memory history recorded``
  in ``other``) is marked ``suspect``: recording stack traces slows every allocation.
* The memory rows of a case that started with more than 64 MiB allocated besides its model
  (``foreign_allocated_at_start_gib`` in ``other``, measured by the probe since 2026-11-28)
  are marked ``suspect``: the case's counters include blocks another case left.
* ``--package-version NAME=VERSION`` replaces a ``NAME present (version unknown)`` in
  ``stack_version`` (a package carried without its dist-info reports no version).
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "data"))

from build import COLUMNS  # noqa: E402

LORA_PRECISION = ("precision=pure (bf16 base weights, no autocast; PEFT keeps the adapters, "
                  "their gradients and AdamW states in fp32: get_peft_model "
                  "autocast_adapter_dtype=True)")
HISTORY = "memory history recorded"
#: more than this allocated besides the model when a case starts makes its memory rows suspect
FOREIGN_LIMIT_GIB = 64 / 1024
FOREIGN = re.compile(r"foreign_allocated_at_start_gib=([\d.]+)")


def convert(folder: Path, versions: dict[str, str]) -> list[dict]:
    by_id: dict[str, dict] = {}
    for path in sorted(folder.glob("memory_probe_*.csv")):
        with open(path, newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                by_id[row["id"]] = row
    out = []
    for row in by_id.values():
        row = {c: row.get(c, "") for c in COLUMNS}
        if row["technique"] in ("lora", "qlora") and "precision=" not in row["other"]:
            row["other"] = f"{row['other']}; {LORA_PRECISION}"
        if row["kind"] == "throughput" and HISTORY in row["other"] and not row["suspect"]:
            row["suspect"] = "step time inflated: this case recorded the allocator history"
        foreign = FOREIGN.search(row["other"])
        if row["kind"] == "memory" and row["oom"] != "true" and foreign and not row["suspect"] \
                and float(foreign.group(1)) > FOREIGN_LIMIT_GIB:
            row["suspect"] = (f"{foreign.group(1)} GiB besides the model was allocated when the "
                              "case began (left by another case): the counters include it")
        for name, version in versions.items():
            row["stack_version"] = row["stack_version"].replace(
                f"{name} present (version unknown)", f"{name} {version}")
        out.append(row)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--package-version", action="append", default=[], metavar="NAME=VERSION")
    args = ap.parse_args(argv)
    versions = {}
    for item in args.package_version:
        name, sep, version = item.partition("=")
        if not sep or not name or not version:
            ap.error(f"--package-version: {item!r} is not NAME=VERSION")
        versions[name] = version
    rows = convert(args.folder, versions)
    if not rows:
        print(f"to_evidence: no memory_probe_*.csv rows under {args.folder}", file=sys.stderr)
        return 1
    w = csv.DictWriter(sys.stdout, fieldnames=list(COLUMNS), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
