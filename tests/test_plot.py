"""``fmest estimate --plot``: the picture is a real image showing the estimate's components."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib", reason="needs the plot extra: pip install 'fmest[plot]'")
Image = pytest.importorskip("PIL.Image", reason="Pillow comes with matplotlib")

import fmest  # noqa: E402
from fmest.errors import InputError  # noqa: E402
from fmest.output.plot import COLOURS, write_plot  # noqa: E402

JOB = {"model": "meta-llama/Llama-2-7b-hf",
       "training": {"micro_batch_size": 2, "activation_checkpointing": "full"},
       "parallelism": {"zero_stage": 3}, "hardware": {"gpu": "A100-80GB", "gpus_per_node": 8},
       "workload": {"dataset_tokens": 2e9}}


def _hex(rgb) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb[:3])


def test_png_shows_each_component_in_its_colour(tmp_path):
    report = fmest.estimate(JOB)
    path = tmp_path / "estimate.png"
    assert write_plot(report, str(path)) == [str(path)]
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 20_000
    with Image.open(path) as image:
        assert image.size[0] >= 800 and image.size[1] >= 400
        counts = {_hex(rgb): n for n, rgb in image.convert("RGB").getcolors(1 << 20)}
    drawn = [k for k, v in report.memory.components.items() if v > 0]
    assert drawn
    # every component of the bar shows in its colour, the capacity line in red
    for name in drawn:
        assert counts.get(COLOURS[name], 0) > 30, f"{name} ({COLOURS[name]}) not drawn"
    assert counts.get("#b3261e", 0) > 100


def test_svg_and_bad_suffix(tmp_path):
    report = fmest.estimate(JOB)
    svg = tmp_path / "estimate.svg"
    assert write_plot(fmest.report_to_dict(report), str(svg)) == [str(svg)]
    text = svg.read_text()
    assert "<svg" in text and "DOES NOT FIT" not in text and "FITS" in text
    with pytest.raises(InputError) as err:
        write_plot(report, str(tmp_path / "estimate.jpg"))
    assert err.value.field == "--plot" and err.value.accepted == [".png", ".svg", ".pdf"]


def test_cli_plot_flag(tmp_path, capsys):
    from fmest.cli import main

    png = tmp_path / "out.png"
    assert main(["estimate", "--model", "Llama-2-7b-hf", "--gpu", "H100", "--plot", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 20_000
    svg = tmp_path / "out.svg"
    assert main(["estimate", "--model", "Llama-2-7b-hf", "--format", "json", "--plot",
                 str(svg)]) == 0
    assert "<svg" in svg.read_text()
    capsys.readouterr()
    assert main(["estimate", "--model", "Llama-2-7b-hf", "--plot", str(tmp_path / "x.gif")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "--plot" in err and ".png, .svg, .pdf" in err
