"""The template plugin works with a fresh plugin manager (copy this test with the plugin)."""

import importlib.util
import sys
from pathlib import Path

from fmest.testing import new_engine


def test_template_registers_its_gpu():
    path = Path(__file__).parent / "fmest_example" / "plugin.py"
    spec = importlib.util.spec_from_file_location("fmest_example_plugin", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    eng = new_engine((mod, "example"))
    assert eng.registries.gpus.get("example-gpu").memory_bytes == 24 * 1024**3
