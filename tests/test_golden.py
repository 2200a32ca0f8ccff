"""The golden answers (scripts/golden.py): a fixed set of ``fmest estimate``/``fmest plan``
command lines must keep answering what ``tests/data/golden/answers.json`` records. A change
that means to move an answer regenerates the file (``python scripts/golden.py --update``) and
names the answers it moves in its commit message."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("fmest_golden", ROOT / "scripts" / "golden.py")
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)

WANT = json.loads(golden.GOLDEN.read_text())


def test_every_case_is_recorded():
    assert sorted(WANT) == sorted(golden.CASES)


@pytest.mark.parametrize("name", sorted(golden.CASES))
def test_golden_answer(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    got = golden.answer(golden.CASES[name])
    assert golden.differences(WANT[name], got) == []


def test_differences_sees_a_moved_number():
    assert golden.differences({"a": [1.0, "x"]}, {"a": [1.0 + 1e-6, "x"]}) == \
        ["$.a[0]: 1.0 -> 1.000001"]
    assert golden.differences({"a": 1}, {"a": 1.0}) == ["$.a: 1 -> 1.0"]
