"""The capacity a job must fit in is the total CUDA reports, not the vendor label (issues 21/22).

``gpus.csv`` ``cuda_total_gib`` is the median of published PyTorch OOM messages' "total
capacity" for that GPU (each figure and its URL in ``cuda_total_source``); the fit verdict, the
allocator reserve's cap at the room left on the device and the planner's capacity use it, and
GPUs with no published figure fall back to the label.
"""

from __future__ import annotations

import json
import re
import statistics
import types

import pytest

from fmest.engine import usable_memory_bytes
from fmest.gpus import GIB, GpuSpec, gpu_from_row, shipped_gpus

_FIGURE = re.compile(r"^(\d+\.\d{2}) GiB (https://github\.com/\S+/issues/\d+)$")


@pytest.fixture(scope="module")
def gpus() -> dict[str, GpuSpec]:
    return {g.name: g for g in shipped_gpus()}


def test_published_rows_carry_their_figures_and_the_median(gpus):
    with_figure = [g for g in gpus.values() if g.cuda_total_bytes]
    assert len(with_figure) >= 8
    for g in with_figure:
        parts = [p.strip() for p in g.cuda_total_source.split(" | ")]
        figures = []
        for part in parts:
            m = _FIGURE.match(part)
            assert m, f"{g.name}: {part!r} is not '<GiB> GiB <issue url>'"
            figures.append(float(m.group(1)))
        # the column is the median of the published figures, not a chosen number
        assert g.cuda_total_bytes == int(statistics.median(figures) * GIB), g.name
        # the driver keeps a little: below the label, but not by more than 10 %
        assert 0.9 * g.memory_bytes < g.cuda_total_bytes < g.memory_bytes, g.name
        assert g.capacity_bytes == g.cuda_total_bytes


def test_rows_without_a_figure_fall_back_to_the_label(gpus):
    for g in gpus.values():
        if not g.cuda_total_bytes:
            assert not g.cuda_total_source, g.name
            assert g.capacity_bytes == g.memory_bytes


def test_published_figures(gpus):
    # GPT-4-LLM #16 79.35, OOTDiffusion #235 79.25, Control-GIC #6 79.14 -> median 79.25
    assert gpus["A100-SXM-80GB"].capacity_bytes == int(79.25 * GIB)
    # CoSeR #10 39.50, DenseCLIP #52 39.59
    assert gpus["A100-SXM-40GB"].capacity_bytes == int(39.545 * GIB)
    assert gpus["RTX4090-24GB"].capacity_bytes == int(23.64 * GIB)
    # the label stays the number shown as GPU memory
    assert gpus["A100-SXM-80GB"].memory_bytes == 80 * GIB


def test_row_parser_reads_the_optional_column():
    row = {"name": "X", "vendor": "v", "memory_gib": "80", "cuda_total_gib": "79.5",
           "cuda_total_source": "79.50 GiB https://github.com/a/b/issues/1"}
    g = gpu_from_row(row)
    assert g.cuda_total_bytes == int(79.5 * GIB) and g.capacity_bytes == g.cuda_total_bytes
    row.pop("cuda_total_gib")
    assert gpu_from_row(row).capacity_bytes == 80 * GIB


class _Ctx:
    def __init__(self, gpu):
        self.gpu = gpu


@pytest.fixture(scope="module")
def engine():
    from fmest.engine import Engine

    return Engine()


def _memory(engine, argv, capsys) -> dict:
    from fmest.cli import main

    capsys.readouterr()
    assert main(["estimate", *argv, "--format", "json"], engine=engine) == 0
    return json.loads(capsys.readouterr().out)["memory"]


def test_usable_memory_is_the_cuda_total(gpus):
    job = types.SimpleNamespace(mode="training",
                                calibration=types.SimpleNamespace(safety_margin=0.0))
    g = gpus["A100-SXM-80GB"]
    assert usable_memory_bytes(job, _Ctx(g)) == pytest.approx(g.cuda_total_bytes)
    # no published figure: the label
    assert usable_memory_bytes(job, _Ctx(gpus["H200-SXM-141GB"])) == pytest.approx(141 * GIB)
    # a spec-like object of a GPU plugin without the attribute: the label
    bare = types.SimpleNamespace(memory_bytes=24 * GIB)
    assert usable_memory_bytes(job, _Ctx(bare)) == pytest.approx(24 * GIB)


def test_verdict_headroom_is_against_the_cuda_total(engine, gpus, capsys):
    """The report's headroom is the CUDA total less the peak; the label stays shown."""
    mem = _memory(engine, ["--model", "meta-llama/Llama-2-7b-hf", "--gpu", "A100-80GB",
                           "--seq-len", "1024", "--technique", "lora"], capsys)
    g = gpus["A100-SXM-80GB"]
    assert mem["gpu_memory_bytes"] == g.memory_bytes
    assert mem["headroom_bytes"] == int(g.cuda_total_bytes - mem["total_bytes"])


def test_reserve_is_capped_at_the_room_cuda_reports(engine, gpus, capsys):
    """Llama-2-7B full fine-tuning at seq 4096 on one A100 80GB: the allocator reserve shrinks
    to the room left under the CUDA total, so the peak never sits between it and the label."""
    mem = _memory(engine, ["--model", "meta-llama/Llama-2-7b-hf", "--gpu", "A100-80GB",
                           "--seq-len", "4096", "--fit-confidence", "0.5"], capsys)
    g = gpus["A100-SXM-80GB"]
    assert not (g.cuda_total_bytes < mem["total_bytes"] <= g.memory_bytes) or not mem["fits"]


def test_memory_theory_caps_the_reserve_at_the_cuda_total(engine, gpus, capsys):
    """The reserve's cap (room left on the device) is measured from the CUDA total."""
    from fmest_memory_theory.estimator import job_setup  # type: ignore[import-not-found]

    _memory(engine, ["--model", "meta-llama/Llama-2-7b-hf", "--gpu", "A100-80GB",
                     "--seq-len", "1024", "--technique", "lora"], capsys)
    job, ctx = engine._last_context
    assert job_setup(job, ctx).capacity_bytes == gpus["A100-SXM-80GB"].cuda_total_bytes
