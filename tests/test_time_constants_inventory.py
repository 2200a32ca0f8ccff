"""docs/time_model.md §9 lists every constant of the time model with its source and kind
(issue 20): the table cannot go stale, every row's kind is one of the allowed words, and a
constant whose comment says it was calibrated, fitted or tuned cannot be given a sourced kind."""

from __future__ import annotations

import ast
import importlib
import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "time_model.md"
HEADING = "## 9. Every constant and where it comes from"
#: short file name used in the table -> (module, path)
FILES = {
    "time_constants.py": ("fmest.physics.time_constants",
                          "core/fmest/physics/time_constants.py"),
    "moe_host.py": ("fmest.physics.moe_host", "core/fmest/physics/moe_host.py"),
    "formulas.py": ("fmest_time_roofline.formulas",
                    "plugins/time_roofline/fmest_time_roofline/formulas.py"),
    "inference.py": ("fmest_time_roofline.inference",
                     "plugins/time_roofline/fmest_time_roofline/inference.py"),
    "estimator.py": ("fmest_time_roofline.estimator",
                     "plugins/time_roofline/fmest_time_roofline/estimator.py"),
}
KINDS = {"spec", "measured", "code", "definition", "hand-set on the evidence", "fitted (LOSO)"}
SOURCED = {"spec", "measured", "code", "definition"}
UPPER = re.compile(r"^[A-Z][A-Z0-9_]*$")
TUNED_WORDS = re.compile(r"\b(calibrated|fitted|tuned)\b", re.IGNORECASE)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_numeric_constant(value) -> bool:
    if _is_number(value):
        return True
    if isinstance(value, dict):
        return bool(value) and all(_is_number(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return bool(value) and all(_is_number(v) for v in value)
    return False


def _code_constants() -> dict[str, tuple[str, object, str]]:
    """name -> (short file, value, comment block above it) for every module-level UPPER_CASE
    numeric constant *defined* (assigned, not imported) in the time model's modules."""
    found: dict[str, tuple[str, object, str]] = {}
    for short, (module_name, rel) in FILES.items():
        module = importlib.import_module(module_name)
        source = (ROOT / rel).read_text(encoding="utf-8")
        lines = source.splitlines()
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign):
                targets = [t for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                targets = [node.target]
            else:
                continue
            comment = []
            i = node.lineno - 2
            while i >= 0 and lines[i].lstrip().startswith("#"):
                comment.append(lines[i])
                i -= 1
            for target in targets:
                if not UPPER.match(target.id):
                    continue
                value = getattr(module, target.id)
                if _is_numeric_constant(value):
                    assert target.id not in found, f"{target.id} defined twice"
                    found[target.id] = (short, value, "\n".join(reversed(comment)))
    return found


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert HEADING in text, f"{HEADING!r} missing from docs/time_model.md"
    return text.split(HEADING, 1)[1].split("\n## ", 1)[0]


def _rows() -> dict[str, dict[str, str]]:
    rows: dict[str, dict[str, str]] = {}
    for line in _section().splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 6, f"row needs 6 cells: {line}"
        name = cells[0].strip("`")
        assert name not in rows, f"{name} listed twice"
        rows[name] = {"file": cells[1].strip("`"), "value": cells[2].strip("`"),
                      "source": cells[4], "kind": cells[5].strip("`")}
    return rows


def _same_number(text: str, value) -> bool:
    return math.isclose(float(text.replace("_", "")), float(value), rel_tol=1e-12)


def test_scan_finds_the_known_constants():
    code = _code_constants()
    for name in ("FRAMEWORK_OVERHEAD_FRACTION", "HBM_EFFICIENCY", "DECODE_STEP_OVERHEAD_S",
                 "MAMF_FRACTION_BF16"):
        assert name in code
    assert code["HBM_EFFICIENCY"][0] == "time_constants.py"   # defined there, not re-exported
    assert len(code) >= 40


def test_every_code_constant_has_a_row_and_every_row_a_constant():
    code = _code_constants()
    rows = _rows()
    assert sorted(set(code) - set(rows)) == [], "constants missing from docs/time_model.md §9"
    assert sorted(set(rows) - set(code)) == [], "rows in §9 naming no constant of the code"
    for name, (short, _, _) in code.items():
        assert rows[name]["file"] == short, f"{name} is defined in {short}"


def test_every_row_value_is_the_code_value():
    code = _code_constants()
    for name, row in _rows().items():
        value = code[name][1]
        cell = row["value"]
        if isinstance(value, dict):
            pairs = re.findall(r"([\w.\-]+): ([0-9][0-9.eE+\-_]*)", cell)
            assert {k for k, _ in pairs} == set(value), f"{name}: keys {cell}"
            assert len(pairs) == len(value), f"{name}: {cell}"
            for key, number in pairs:
                assert _same_number(number, value[key]), f"{name}[{key}]: {cell} vs {value}"
        elif isinstance(value, (tuple, list)):
            numbers = re.findall(r"[0-9][0-9.eE+\-_]*", cell)
            assert len(numbers) == len(value), f"{name}: {cell}"
            assert all(_same_number(a, b) for a, b in zip(numbers, value, strict=True)), f"{name}: {cell}"
        else:
            assert _same_number(cell, value), f"{name}: table {cell}, code {value}"


def test_every_kind_is_an_allowed_word_and_counts_match():
    rows = _rows()
    bad = {n: r["kind"] for n, r in rows.items() if r["kind"] not in KINDS}
    assert bad == {}
    counts = {kind: sum(r["kind"] == kind for r in rows.values()) for kind in KINDS}
    section = _section()
    assert f"Counts ({len(rows)} constants)" in section
    for kind, n in counts.items():
        assert f"`{kind}` {n}" in section, f"count of {kind} should be {n}"


def test_calibrated_or_fitted_constants_are_not_given_a_sourced_kind():
    rows = _rows()
    for name, (_, _, comment) in _code_constants().items():
        if TUNED_WORDS.search(comment):
            assert rows[name]["kind"] not in SOURCED, (
                f"{name}: its comment says calibrated/fitted/tuned, kind {rows[name]['kind']}")


def test_section_7_calibrated_constants_are_hand_set():
    text = DOC.read_text(encoding="utf-8")
    seven = text.split("## 7. ", 1)[1].split("\n## ", 1)[0]
    # the paragraph that names them ends where section 9 is cited
    listed = seven.split("Calibrated globally", 1)[1].split("Section 9", 1)[0]
    names = re.findall(r"`([A-Z][A-Z0-9_]+)`", listed)
    assert 1 <= len(names) <= 4   # issue 20 gave the others a source
    rows = _rows()
    for name in names:
        assert rows[name]["kind"] == "hand-set on the evidence", name


def test_rows_with_no_source_given_have_no_sourced_kind():
    """A row whose source cell starts "no source given" cannot claim a sourced kind."""
    rows = _rows()
    unsourced = {n: r["kind"] for n, r in rows.items()
                 if r["source"].startswith("no source given")}
    assert unsourced, "the table marks some constants as unsourced"
    assert {n: k for n, k in unsourced.items() if k in SOURCED} == {}
