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


# ---------------------------------------------------------------------------------------------
# fmest plan --plot (issue 26): title, axes with units, a colour per GPU type, the front, and
# an empty state that says why
# ---------------------------------------------------------------------------------------------

def _plan(rank, gpu, hours, usd, *, stale=False, per_hour=20.0, step=5.0):
    return {"rank": rank, "gpu": gpu, "total_seconds": None if hours is None else hours * 3600,
            "total_hours": hours, "usd": usd, "usd_per_hour": per_hour, "step_seconds": step,
            "price_stale": stale, "pareto": False}


PLAN_DATA = {"objective": "pareto", "total_tokens": 1e9, "rejected": {"does not fit": 12},
             "constraints": {"gpus": ["H100-SXM", "A100-80GB"]},
             "plans": [_plan(1, "A100-80GB", 10.0, 50.0), _plan(2, "H100-SXM-80GB", 4.0, 60.0),
                       _plan(3, "H100-SXM-80GB", 5.0, 70.0, stale=True),
                       _plan(4, "A100-80GB", 12.0, 55.0), _plan(5, "H100-SXM-80GB", 2.0, 90.0)]}


def _texts(fig) -> str:
    return "\n".join(t.get_text() for t in fig.findobj(lambda o: hasattr(o, "get_text")))


def test_plan_axes_pick_units_and_the_front():
    from fmest.output.plot import plan_axes

    axes = plan_axes(PLAN_DATA)
    assert axes["whole_run"] and axes["xlabel"] == "total time (hours)"
    assert axes["ylabel"] == "cost (USD)"
    assert axes["front"] == [5, 2, 1]          # least time first; 3 and 4 are dominated
    no_data = {**PLAN_DATA, "total_tokens": None,
               "plans": [_plan(1, "L4", None, None, per_hour=2.0, step=9.0),
                         _plan(2, "L4", None, None, per_hour=4.0, step=3.0),
                         _plan(3, "L4", None, None, per_hour=5.0, step=4.0)]}
    axes = plan_axes(no_data)
    assert not axes["whole_run"] and axes["xlabel"] == "step time (s)"
    assert axes["ylabel"] == "price (USD per hour)"
    assert [(p["x"], p["y"]) for p in axes["points"]] == [(9.0, 2.0), (3.0, 4.0), (4.0, 5.0)]
    assert axes["front"] == [2, 1]


def test_plan_figure_has_a_title_labels_a_legend_and_the_front():
    from fmest.output.plot import plan_figure

    fig = plan_figure(PLAN_DATA, model="meta-llama/Llama-3.1-8B")
    title = fig._suptitle.get_text()   # Figure.get_suptitle is matplotlib >= 3.8
    assert "meta-llama/Llama-3.1-8B" in title and "H100-SXM, A100-80GB" in title
    assert "objective pareto" in title
    (ax,) = fig.axes
    assert ax.get_xlabel() == "total time (hours)" and ax.get_ylabel() == "cost (USD)"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["A100-80GB", "H100-SXM-80GB", "Pareto front", "stale price"]
    front = [ln for ln in ax.get_lines() if ln.get_label() == "Pareto front"][0]
    assert list(front.get_xdata()) == [2.0, 4.0, 10.0] and front.get_marker() == "D"
    assert "1 plan(s) priced from a STALE quote" in _texts(fig)


def test_plan_png_draws_each_gpu_in_its_own_colour(tmp_path):
    from fmest.output.plot import GPU_COLOURS, write_plan_plot

    path = tmp_path / "plan.png"
    assert write_plan_plot(PLAN_DATA, str(path), model="m") == str(path)
    with Image.open(path) as image:
        counts = {_hex(rgb): n for n, rgb in image.convert("RGB").getcolors(1 << 20)}
    assert counts.get(GPU_COLOURS[0], 0) > 30 and counts.get(GPU_COLOURS[1], 0) > 30
    pdf = tmp_path / "plan.pdf"
    write_plan_plot(PLAN_DATA, str(pdf), model="m")
    assert pdf.read_bytes()[:5] == b"%PDF-"
    with pytest.raises(InputError) as err:
        write_plan_plot(PLAN_DATA, str(tmp_path / "plan.jpg"))
    assert err.value.field == "--plot" and err.value.accepted == [".png", ".svg", ".pdf"]


def test_empty_plan_plots_say_why():
    from fmest.output.plot import plan_figure

    none_fit = {**PLAN_DATA, "plans": [],
                "rejected": {"does not fit": 324, "heads not divisible by tp": 1080,
                             "a": 3, "b": 2, "c": 1}}
    fig = plan_figure(none_fit, model="m")
    text = _texts(fig)
    assert "no plan fits" in text and "heads not divisible by tp: 1,080" in text
    assert "does not fit: 324" in text and "c: 1" not in text   # the main reasons only
    no_dataset = {**PLAN_DATA, "total_tokens": None,
                  "plans": [_plan(1, "L4", None, None, per_hour=2.0, step=9.0)]}
    fig = plan_figure(no_dataset, model="m")
    assert "no dataset size: plotting step time and $/hour" in _texts(fig).replace("\\$", "$")
    assert fig.axes[0].get_xlabel() == "step time (s)"
    unpriced = {**PLAN_DATA, "plans": [_plan(1, "L4", 3.0, None)]}
    assert "no plan has a price" in _texts(plan_figure(unpriced, model="m"))


def test_estimate_footer_reads_durations_as_the_tables_do():
    from fmest.output.plot import _footer
    from fmest.output.units import duration

    text = _footer({"time": {"step_seconds": 6.912, "total_seconds": 16200.0}})
    assert text == f"step {duration(6.912)}   ·   whole run {duration(16200.0)}"
    assert text == "step 6.91 s   ·   whole run 4.5 h"


def test_estimate_checks_the_plot_folder_before_any_work(tmp_path, capsys):
    """A --plot whose folder cannot take a file (here: a file stands where the folder
    should be) is refused at once, naming --plot, as fmest plan does."""
    from fmest.cli import main

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    assert main(["estimate", "--model", "gpt2", "--seq-len", "512",
                 "--plot", str(blocker / "out.png")]) == 2
    err = capsys.readouterr().err
    assert "--plot:" in err and "not-a-folder" in err
