"""``benchmarks/accuracy.py --extra CSV``: an evidence file kept outside the repository is
scored in aggregate lines only (no row id, no per-row error)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import accuracy  # noqa: E402  benchmarks/accuracy.py
import measured  # noqa: E402  benchmarks/measured.py

IDS = ("ho-zzq-test-mem-row", "ho-zzq-test-tps-row")


def _write(path: Path) -> None:
    with open(measured.DEFAULT_CSV, newline="", encoding="utf-8") as fh:
        columns = next(csv.reader(fh))
    common = {c: "" for c in columns}
    common.update(source="zzq-test-source", model="meta-llama/Llama-3.2-3B-Instruct",
                  params_b="3.21", gpu="A100-SXM-80GB", num_gpus="1", dtype="bf16",
                  technique="full", seq_len="4096", micro_batch="2", grad_accum="1", dp="1",
                  tp="1", pp="1", cp="1", zero_or_fsdp="none", activation_checkpointing="none",
                  flash_attention="true", stack="torchtune", source_url="https://example.org",
                  source_quote="a test row", date_read="2026-11-27")
    rows = [dict(common, id=IDS[0], kind="memory", measured_value="60.0", unit="GiB",
                 measure_type="max_memory_allocated"),
            dict(common, id=IDS[1], kind="throughput", measured_value="7000",
                 unit="tokens_per_sec_per_gpu")]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


@pytest.fixture(scope="module")
def extra_csv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("extra") / "rows.csv"
    _write(path)
    return path


def test_extra_prints_aggregate_lines_and_no_row_id(extra_csv, capsys):
    assert accuracy.main(["--extra", str(extra_csv)]) == 0
    out = capsys.readouterr().out
    assert "fmest on an EXTRA evidence file: 1 sources, 2 rows" in out
    assert "== EXTRA MEMORY" in out and "== EXTRA THROUGHPUT" in out
    assert "baseline 16 B/param (same rows)" in out and "baseline 6N @40% peak" in out
    fmest_lines = [ln for ln in out.splitlines() if ln.strip().startswith("fmest ")
                   and "%" in ln]
    assert len(fmest_lines) == 2 and all(" 1 " in ln for ln in fmest_lines)
    for row_id in IDS:
        assert row_id not in out
    assert "zzq-test-source" not in out


def test_extra_json_names_no_row(extra_csv, capsys):
    assert accuracy.main(["--extra", str(extra_csv), "--json"]) == 0
    text = capsys.readouterr().out
    agg = json.loads(text)
    assert agg["rows"] == 2 and agg["memory"]["fmest"]["rows"] == 1
    assert all(row_id not in text for row_id in IDS)


def test_extra_refuses_row_listing(extra_csv):
    with pytest.raises(SystemExit):
        accuracy.main(["--extra", str(extra_csv), "--rows"])
