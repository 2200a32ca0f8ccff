"""The bad-input fuzz benchmark (benchmarks/fuzz.py) at a small count: no input crashes, and
at most 10 % of the inputs meant to be bad are answered without a refusal or a warning that
names them. The full run (python benchmarks/fuzz.py, ~1,500 inputs) is in docs/benchmarks.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import fuzz  # noqa: E402


@pytest.fixture(scope="module")
def result():
    return fuzz.run(seed=0, count=200)


def test_no_crash(result):
    assert result["counts"]["crash"] == 0, result["crashes"]


def test_silent_acceptances_at_most_a_tenth_of_the_bad_inputs(result):
    assert result["bad_inputs"] >= 150
    assert result["counts"]["silent"] <= 0.1 * result["bad_inputs"], result["silent"]


def test_every_property_failure_is_documented_physics(result):
    assert result["properties"]["undocumented"] == 0, result["property_failures"]


def test_seeded_and_deterministic():
    one = [c.label for c in fuzz.all_cases(3, 150)]
    assert one == [c.label for c in fuzz.all_cases(3, 150)]
    assert {c.category for c in fuzz.all_cases(3, 150)} >= {"types", "numbers", "names",
                                                             "conflicts", "flags", "configs"}
