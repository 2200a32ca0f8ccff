"""Accelerators: the spec record and the loader of the shipped table.

The shipped table is ``fmest/data/gpus.csv`` (one row per accelerator, each with its source
URL and the date it was checked); it is registered by the default ``gpus`` plugin through the
``fmest_register_gpus`` hook, like any third-party GPU plugin would.
"""

from __future__ import annotations

import csv
from importlib import resources
from typing import Iterator, Optional

from attrs import field, frozen

GIB = 1024**3


def _opt_float(v: str | None) -> Optional[float]:
    v = (v or "").strip()
    return float(v) if v else None


@frozen(kw_only=True)
class GpuSpec:
    """One accelerator. Peak FLOP/s are dense (not 2:4 sparse) tensor-core figures.

    ``memory_bytes`` is the device memory as the vendor labels it, read as GiB (an 80 GB A100
    is 80 GiB): the number shown as "GPU memory". ``cuda_total_bytes`` is the total capacity
    CUDA reports for it (``torch.cuda.get_device_properties().total_memory``, the "total
    capacity" of a PyTorch OOM message), which is less than the label by what the driver
    reserves (an A100 80GB reports 79.14-79.35 GiB); ``None`` where no figure is published.
    ``capacity_bytes`` is what a job must fit in: that total where known, else the label.
    Link bandwidths are per GPU, one direction.
    """

    name: str
    vendor: str
    memory_bytes: int
    #: total capacity CUDA reports (bytes); ``None`` = not published, the label is used
    cuda_total_bytes: Optional[int] = None
    #: the published figures behind ``cuda_total_bytes`` ("79.25 GiB https://..." | ...)
    cuda_total_source: str = ""
    hbm_bytes_per_s: Optional[float] = None
    fp32_flops_per_s: Optional[float] = None
    tf32_flops_per_s: Optional[float] = None
    fp16_flops_per_s: Optional[float] = None
    bf16_flops_per_s: Optional[float] = None
    fp8_flops_per_s: Optional[float] = None
    int8_ops_per_s: Optional[float] = None
    intra_node_bytes_per_s: Optional[float] = None
    inter_node_bytes_per_s: Optional[float] = None
    pcie_bytes_per_s: Optional[float] = None
    tdp_watts: Optional[float] = None
    #: capabilities (``None`` = not verified): the architecture, CUDA compute capability
    #: ("8.0"), whether the chip has BF16 / FP8 matrix units, and whether FlashAttention-2
    #: supports it; ``capability_source`` cites the architecture whitepaper and the FA2 README
    architecture: str = ""
    compute_capability: Optional[str] = None
    bf16_units: Optional[bool] = None
    fp8_units: Optional[bool] = None
    flash_attention_2: Optional[bool] = None
    capability_source: str = ""
    form_factor: str = ""
    aliases: tuple[str, ...] = field(factory=tuple)
    source: str = ""
    checked: str = ""
    notes: str = ""

    @property
    def capacity_bytes(self) -> int:
        """Bytes a job must fit in: the total CUDA reports where a figure is published,
        else the vendor label (``memory_bytes``)."""
        return self.cuda_total_bytes if self.cuda_total_bytes else self.memory_bytes

    def peak_flops_per_s(self, dtype: str) -> Optional[float]:
        """Dense peak for a compute dtype. ``fp32`` is plain fp32 (PyTorch's default matmul
        precision 'highest' does not use TF32 since 1.12); ask for ``tf32`` explicitly. GPUs
        without bf16 units fall back to their fp16 figure, without fp8 to bf16."""
        table = {"fp32": self.fp32_flops_per_s, "tf32": self.tf32_flops_per_s,
                 "fp16": self.fp16_flops_per_s, "bf16": self.bf16_flops_per_s or self.fp16_flops_per_s,
                 "fp8": self.fp8_flops_per_s or self.bf16_flops_per_s}
        return table.get(dtype)


_FLOAT_COLS = {
    "hbm_tb_per_s": ("hbm_bytes_per_s", 1e12),
    "fp32_tflops": ("fp32_flops_per_s", 1e12),
    "tf32_tflops": ("tf32_flops_per_s", 1e12),
    "fp16_tflops": ("fp16_flops_per_s", 1e12),
    "bf16_tflops": ("bf16_flops_per_s", 1e12),
    "fp8_tflops": ("fp8_flops_per_s", 1e12),
    "int8_tops": ("int8_ops_per_s", 1e12),
    "intra_node_gb_per_s_unidir": ("intra_node_bytes_per_s", 1e9),
    "inter_node_gbit_per_s": ("inter_node_bytes_per_s", 1e9 / 8),
    "pcie_gb_per_s_unidir": ("pcie_bytes_per_s", 1e9),
    "tdp_w": ("tdp_watts", 1.0),
}


def _opt_bool(v: str | None) -> Optional[bool]:
    v = (v or "").strip().lower()
    if not v:
        return None
    if v in ("yes", "no"):
        return v == "yes"
    raise ValueError(f"expected yes, no or empty, got {v!r}")


def gpu_from_row(row: dict[str, str]) -> GpuSpec:
    """Build a :class:`GpuSpec` from a row of the shipped CSV (columns documented in
    ``fmest/data/README.md``)."""
    kwargs: dict = {}
    for col, (attr, scale) in _FLOAT_COLS.items():
        v = _opt_float(row.get(col))
        kwargs[attr] = v * scale if v is not None else None
    mem_gib = float(row["memory_gib"])
    cuda_gib = _opt_float(row.get("cuda_total_gib"))
    return GpuSpec(
        name=row["name"].strip(),
        vendor=row.get("vendor", "").strip(),
        memory_bytes=int(mem_gib * GIB),
        cuda_total_bytes=int(cuda_gib * GIB) if cuda_gib is not None else None,
        cuda_total_source=(row.get("cuda_total_source") or "").strip(),
        form_factor=row.get("form_factor", "").strip(),
        architecture=(row.get("architecture") or "").strip(),
        compute_capability=(row.get("compute_capability") or "").strip() or None,
        bf16_units=_opt_bool(row.get("bf16_units")),
        fp8_units=_opt_bool(row.get("fp8_units")),
        flash_attention_2=_opt_bool(row.get("flash_attention_2")),
        capability_source=(row.get("capability_source") or "").strip(),
        aliases=tuple(a.strip() for a in (row.get("aliases") or "").split("|") if a.strip()),
        source=row.get("source_url", "").strip(),
        checked=row.get("checked", "").strip(),
        notes=row.get("notes", "").strip(),
        **kwargs,
    )


def shipped_gpus() -> Iterator[GpuSpec]:
    """The accelerators in the shipped table."""
    text = resources.files("fmest").joinpath("data/gpus.csv").read_text(encoding="utf-8")
    for row in csv.DictReader(line for line in text.splitlines() if not line.startswith("#")):
        yield gpu_from_row(row)
