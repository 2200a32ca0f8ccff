"""Checks on the shipped accelerator table ``fmest/data/gpus.csv`` (run with ``PYTHONPATH=core``).

Structural checks (columns, sources, dates, alias uniqueness) plus a few published-number
checks against vendor datasheets, so that a bad edit of a well-known figure is caught.
"""

from __future__ import annotations

import csv
import re
from datetime import date
from importlib import resources

import pytest

from fmest.gpus import GIB, GpuSpec, shipped_gpus

EXPECTED_COLUMNS = (
    "name,vendor,form_factor,aliases,memory_gib,hbm_tb_per_s,fp32_tflops,tf32_tflops,fp16_tflops,"
    "bf16_tflops,fp8_tflops,int8_tops,intra_node_gb_per_s_unidir,inter_node_gbit_per_s,"
    "pcie_gb_per_s_unidir,tdp_w,architecture,compute_capability,bf16_units,fp8_units,flash_attention_2,"
    "capability_source,checked,source_url,notes,cuda_total_gib,cuda_total_source"
).split(",")

# alias -> canonical row name it must resolve to
REQUIRED_ALIASES = {
    "A100-40GB": "A100-SXM-40GB",
    "A100-80GB": "A100-SXM-80GB",
    "a100": "A100-SXM-80GB",
    "a100-sxm4-80gb": "A100-SXM-80GB",
    "a100-sxm4-40gb": "A100-SXM-40GB",
    "H100-SXM": "H100-SXM-80GB",
    "H100-80GB": "H100-SXM-80GB",
    "h100": "H100-SXM-80GB",
    "h100-sxm5-80gb": "H100-SXM-80GB",
    "H100-PCIE": "H100-PCIE-80GB",
    "H200": "H200-SXM-141GB",
    "H800": "H800-SXM-80GB",
    "RTX-4090": "RTX4090-24GB",
    "RTX-A6000": "RTX-A6000-48GB",
    "L40S": "L40S-48GB",
    "V100": "V100-SXM2-16GB",
    "T4": "T4-16GB",
    "A10G": "A10G-24GB",
    "L4": "L4-24GB",
    "B200": "B200-SXM-180GB",
    "MI300X": "MI300X-192GB",
}

# Rows the estimator is expected to ship (by canonical name).
REQUIRED_ROWS = {
    "V100-SXM2-16GB", "V100-SXM2-32GB", "T4-16GB", "A10G-24GB", "A10-24GB", "L4-24GB", "L40S-48GB",
    "L40-48GB", "RTX3090-24GB", "RTX4090-24GB", "RTX-A6000-48GB", "RTX6000-ADA-48GB", "A100-SXM-40GB",
    "A100-SXM-80GB", "A100-PCIE-40GB", "A100-PCIE-80GB", "H100-SXM-80GB", "H100-PCIE-80GB",
    "H100-NVL-94GB", "H100-SXM-96GB", "H800-SXM-80GB", "H200-SXM-141GB", "H20-96GB", "B200-SXM-180GB",
    "GB200-186GB", "MI250X-128GB", "MI300X-192GB", "MI325X-256GB", "GAUDI2-96GB", "GAUDI3-128GB",
    "TPU-v4", "TPU-v5e", "TPU-v5p", "TPU-v6e",
}

TFLOP = 1e12


@pytest.fixture(scope="module")
def gpus() -> list[GpuSpec]:
    return list(shipped_gpus())


@pytest.fixture(scope="module")
def by_key(gpus) -> dict[str, GpuSpec]:
    """Case-insensitive lookup by name or alias."""
    out: dict[str, GpuSpec] = {}
    for g in gpus:
        for key in (g.name, *g.aliases):
            out[key.lower()] = g
    return out


def _raw_text() -> str:
    return resources.files("fmest").joinpath("data/gpus.csv").read_text(encoding="utf-8")


def _raw_rows() -> list[dict[str, str]]:
    return list(csv.DictReader(line for line in _raw_text().splitlines() if not line.startswith("#")))


# --- structure -------------------------------------------------------------------------------------

def test_header_comment_and_columns():
    lines = _raw_text().splitlines()
    comments = [ln for ln in lines if ln.startswith("#")]
    assert comments and lines[0].startswith("#"), "the table starts with a header comment"
    text = "\n".join(comments).lower()
    assert "dense" in text and "2026-11-22" in text and "direction" in text
    header = next(ln for ln in lines if not ln.startswith("#"))
    assert header.split(",") == EXPECTED_COLUMNS


def test_every_row_has_all_columns_and_parses():
    rows = _raw_rows()
    assert len(rows) >= len(REQUIRED_ROWS)
    for r in rows:
        assert None not in r, f"{r.get('name')}: too many fields"
        assert all(r[c] is not None for c in EXPECTED_COLUMNS), f"{r.get('name')}: too few fields"
        float(r["memory_gib"])


def test_required_rows_present(gpus):
    names = {g.name for g in gpus}
    assert REQUIRED_ROWS <= names, REQUIRED_ROWS - names


def test_every_row_has_source_and_checked_date(gpus):
    for g in gpus:
        assert g.source, g.name
        for url in g.source.split(" | "):
            assert re.match(r"^https?://\S+$", url.strip()), f"{g.name}: bad source {url!r}"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", g.checked), f"{g.name}: checked={g.checked!r}"
        # a row's check date cannot lie in the future (rows are re-checked one by one,
        # so they may be newer than the header's whole-table date)
        assert date.fromisoformat(g.checked) <= date.today(), f"{g.name}: checked in the future"
        assert g.vendor and g.form_factor, g.name
        assert g.notes, f"{g.name}: caveats/verification level belong in notes"


def test_names_and_aliases_unique_case_insensitive(gpus):
    owner: dict[str, str] = {}
    for g in gpus:
        for key in (g.name, *g.aliases):
            k = key.strip().lower()
            assert k, f"{g.name}: empty alias"
            assert owner.setdefault(k, g.name) == g.name, f"{key!r} used by {owner[k]} and {g.name}"


def test_aliases_unique_after_separator_normalisation(gpus):
    """'H100 SXM' / 'h100_sxm' / 'H100-SXM' must never point at two different rows."""
    owner: dict[str, str] = {}
    for g in gpus:
        for key in (g.name, *g.aliases):
            k = re.sub(r"[^0-9a-z]", "", key.lower())
            assert owner.setdefault(k, g.name) == g.name, f"{key!r}: {owner[k]} vs {g.name}"


@pytest.mark.parametrize("alias,name", sorted(REQUIRED_ALIASES.items()))
def test_required_alias_resolves(by_key, alias, name):
    assert alias.lower() in by_key, f"missing alias {alias}"
    assert by_key[alias.lower()].name == name


# --- sanity of the numbers -------------------------------------------------------------------------

def test_positive_and_plausible_ranges(gpus):
    for g in gpus:
        assert 8 * GIB <= g.memory_bytes <= 512 * GIB, g.name
        assert g.hbm_bytes_per_s and 0.1e12 <= g.hbm_bytes_per_s <= 20e12, g.name
        for attr in ("fp32_flops_per_s", "tf32_flops_per_s", "fp16_flops_per_s", "bf16_flops_per_s",
                     "fp8_flops_per_s", "int8_ops_per_s"):
            v = getattr(g, attr)
            assert v is None or 1e12 <= v <= 20e15, (g.name, attr, v)
        for attr, hi in (("intra_node_bytes_per_s", 2e12), ("inter_node_bytes_per_s", 200e9),
                         ("pcie_bytes_per_s", 256e9), ("tdp_watts", 2000)):
            v = getattr(g, attr)
            assert v is None or 0 < v <= hi, (g.name, attr, v)


def test_precision_ordering(gpus):
    for g in gpus:
        if g.bf16_flops_per_s and g.fp32_flops_per_s:
            assert g.bf16_flops_per_s >= g.fp32_flops_per_s, g.name
        if g.fp16_flops_per_s and g.fp32_flops_per_s:
            assert g.fp16_flops_per_s >= g.fp32_flops_per_s, g.name
        if g.tf32_flops_per_s and g.fp32_flops_per_s:
            assert g.tf32_flops_per_s >= g.fp32_flops_per_s, g.name
        if g.fp8_flops_per_s and g.bf16_flops_per_s:
            assert g.fp8_flops_per_s >= g.bf16_flops_per_s, g.name
        if g.tf32_flops_per_s and g.bf16_flops_per_s:
            assert g.tf32_flops_per_s <= g.bf16_flops_per_s, g.name


def test_pcie_is_a_pci_sig_generation(gpus):
    # PCI-SIG x16 per direction: Gen3 8 GT/s ~16 GB/s, Gen4 16 GT/s ~32, Gen5 32 GT/s ~64.
    for g in gpus:
        if g.pcie_bytes_per_s is not None:
            assert g.pcie_bytes_per_s / 1e9 in (16, 32, 64), g.name


def test_dense_not_sparse_headlines(by_key):
    """Sparse vendor headlines must have been halved (2:4 sparsity doubles them)."""
    assert by_key["h100"].fp8_flops_per_s == pytest.approx(1978.9 * TFLOP)   # not 3958
    assert by_key["l4"].bf16_flops_per_s == pytest.approx(121 * TFLOP)       # not 242
    assert by_key["b200"].bf16_flops_per_s == pytest.approx(2250 * TFLOP)    # not 4500


# --- published numbers -------------------------------------------------------------------------------

def test_h100_sxm_bf16_dense_is_989(by_key):
    # NVIDIA H100 datasheet (https://www.nvidia.com/en-us/data-center/h100/): BF16 Tensor Core
    # 1,979 TFLOPS "with sparsity" -> 989 TFLOPS dense (1830 MHz x 528 TC x 512 FMA x 2 = 989.4).
    g = by_key["h100-sxm"]
    assert round(g.bf16_flops_per_s / TFLOP) == 989
    assert g.peak_flops_per_s("bf16") == g.bf16_flops_per_s
    assert g.memory_bytes == 80 * GIB
    assert g.hbm_bytes_per_s == pytest.approx(3.35e12)
    assert g.intra_node_bytes_per_s == pytest.approx(450e9)     # 900 GB/s NVLink 4 is bidirectional
    assert g.inter_node_bytes_per_s == pytest.approx(400e9 / 8)  # 400 Gb/s NIC per GPU
    assert g.pcie_bytes_per_s == pytest.approx(64e9)


def test_a100_published_numbers(by_key):
    # NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): BF16 312 dense,
    # TF32 156 dense, FP32 19.5, 40 GB / 80 GB, 1,555 / 2,039 GB/s (SXM), NVLink 600 GB/s.
    a40, a80 = by_key["a100-40gb"], by_key["a100-80gb"]
    assert a40.memory_bytes == 40 * GIB
    assert a80.memory_bytes == 80 * GIB
    assert by_key["a100"] is a80
    for g in (a40, a80):
        assert g.bf16_flops_per_s == pytest.approx(312 * TFLOP)
        assert g.tf32_flops_per_s == pytest.approx(156 * TFLOP)
        assert g.fp32_flops_per_s == pytest.approx(19.5 * TFLOP)
        assert g.intra_node_bytes_per_s == pytest.approx(300e9)
        assert g.fp8_flops_per_s is None  # Ampere has no FP8
    assert a40.hbm_bytes_per_s == pytest.approx(1.555e12)
    assert a80.hbm_bytes_per_s == pytest.approx(2.039e12)


def test_other_published_numbers(by_key):
    assert by_key["h200"].memory_bytes == 141 * GIB          # nvidia.com/h200: 141 GB HBM3e, 4.8 TB/s
    assert by_key["h200"].hbm_bytes_per_s == pytest.approx(4.8e12)
    assert by_key["mi300x"].memory_bytes == 192 * GIB         # amd.com MI300X: 192 GB, 1307.4 BF16 dense
    assert by_key["mi300x"].bf16_flops_per_s == pytest.approx(1307.4 * TFLOP)
    assert by_key["rtx-4090"].bf16_flops_per_s == pytest.approx(165.2 * TFLOP)  # FP32-accumulate rate
    assert by_key["v100"].fp16_flops_per_s == pytest.approx(125 * TFLOP)       # V100 datasheet
    assert by_key["v100"].bf16_flops_per_s is None                            # no BF16 on Volta
    assert by_key["t4"].memory_bytes == 16 * GIB
    assert by_key["h800"].bf16_flops_per_s == by_key["h100"].bf16_flops_per_s
    assert by_key["h800"].intra_node_bytes_per_s < by_key["h100"].intra_node_bytes_per_s


def test_unverified_figures_are_flagged(by_key):
    # A10G has no NVIDIA datasheet: compute left empty on purpose, and the notes say so.
    g = by_key["a10g"]
    assert g.bf16_flops_per_s is None and g.fp32_flops_per_s is None
    assert "datasheet" in g.notes.lower()
