"""A third party builds a GPU + price plugin from templates/plugin/ exactly as
docs/writing_a_plugin.md says (the renames are read from the doc), and it works."""

from __future__ import annotations

import importlib
import re
import shutil
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "writing_a_plugin.md"
PLACEHOLDERS = ("yourplugin", "YOURGPU", "yourcloud", "YOURVENDOR")


def _renames() -> list[tuple[str, str]]:
    """The ``-e 's/OLD/NEW/g'`` pairs of the doc's sed command."""
    pairs = re.findall(r"-e 's/([^/]+)/([^/]+)/g'", DOC.read_text())
    assert pairs, "docs/writing_a_plugin.md lost its rename command"
    return pairs


def _build(tmp_path: Path) -> Path:
    dest = tmp_path / "plugins" / "acme"
    shutil.copytree(ROOT / "templates" / "plugin", dest)
    (dest / "fmest_yourplugin").rename(dest / "fmest_acme")  # the doc's mv step
    for path in dest.rglob("*"):
        if path.is_file():
            text = path.read_text()
            for old, new in _renames():
                text = text.replace(old, new)
            path.write_text(text)
    return dest


def test_template_builds_a_working_gpu_and_price_plugin(tmp_path, monkeypatch):
    dest = _build(tmp_path)
    leftover = [str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()
                and any(h.lower() in (p.read_text() + p.name).lower() for h in PLACEHOLDERS)]
    assert leftover == [], f"placeholders left after the documented renames: {leftover}"
    meta = tomllib.loads((dest / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "fmest-acme"
    assert "test" in meta["project"]["optional-dependencies"]
    ((name, target),) = meta["project"]["entry-points"]["fmest"].items()
    monkeypatch.syspath_prepend(str(dest))
    plugin = importlib.import_module(target)
    assert name == "acme" and target == "fmest_acme.plugin"

    sys.modules.pop("test_plugin", None)
    monkeypatch.syspath_prepend(str(dest / "tests"))
    importlib.import_module("test_plugin").test_gpu_and_prices_are_registered()

    import fmest_cost_cloud.plugin as cost_cloud
    import fmest_memory_theory.plugin as memory_theory
    import fmest_time_roofline.plugin as time_roofline
    from fmest.testing import new_engine

    engine = new_engine((plugin, name), (cost_cloud, "cost_cloud"),
                        (memory_theory, "memory_theory"), (time_roofline, "time_roofline"))
    report = engine.estimate(_job(), quantities=("memory", "time", "cost"))
    assert report.context.gpu.name == "ACME1-80GB"
    assert report.memory.total_bytes > 0 and report.time.step_seconds > 0
    assert (report.cost.provider, report.cost.usd_per_hour) == ("acmecloud", 24.0)
    assert report.cost.usd == report.time.total_seconds / 3600 * 24.0


def _job():
    from fmest.convert import job_from_dict

    return job_from_dict({"model": "llama-3.1-8b",
                          "hardware": {"gpu": "acme1", "gpus_per_node": 8},
                          "pricing": {"provider": "acmecloud"},
                          "workload": {"dataset_tokens": 1e9}})
