"""Docs cannot drift: every hook and each of its arguments is documented."""

from __future__ import annotations

import inspect
from pathlib import Path

from fmest import hookspecs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _hooks():
    return [(n, f) for n, f in vars(hookspecs).items()
            if n.startswith("fmest_") and callable(f)]


def test_every_hook_and_argument_is_documented():
    text = (DOCS / "plugin_hooks.md").read_text()
    hooks = _hooks()
    assert len(hooks) >= 10
    for name, fn in hooks:
        assert f"`{name}" in text, f"{name} missing from docs/plugin_hooks.md"
        section = text.split(f"`{name}", 1)[1].split("\n## ", 1)[0]
        for arg in inspect.signature(fn).parameters:
            assert f"`{arg}`" in section, f"argument {arg} of {name} not documented"


def test_every_hook_has_a_docstring_with_its_return_contract():
    for name, fn in _hooks():
        doc = inspect.getdoc(fn) or ""
        assert "Fires" in doc or "Return" in doc or "Returns" in doc, name


def test_readme_test_command_is_what_ci_runs():
    root = DOCS.parent
    readme = (root / "README.md").read_text()
    ci = (root / ".ci" / "run").read_text()
    assert "python -m pytest -q" in readme and "python -m pytest -q" in ci


def test_every_cli_flag_is_in_docs_cli():
    from fmest.cli import build_parser

    text = (DOCS / "cli.md").read_text()
    commands = build_parser().fmest_commands
    for name in ("estimate", "export", "models", "gpus", "plugins"):
        for action in commands[name][1]._actions:
            for opt in action.option_strings:
                if opt.startswith("--") and opt != "--help":
                    assert f"`{opt}`" in text, f"{opt} of fmest {name} missing from docs/cli.md"


def test_every_environment_variable_is_in_docs_environment():
    """Every variable the product or a plugin reads by a literal name has a row in
    docs/environment.md (what it changes, whether it changes answers, its default)."""
    import re

    text = (DOCS / "environment.md").read_text()
    # variables are named in string literals, often through a helper (_env_list("FMEST_..."))
    pattern = re.compile(r"""["'`]((?:FMEST|HF|HUGGING_FACE|RAY)_[A-Z0-9_]+)\b""")
    not_variables = {"FMEST_PROBE_ROW"}   # the probe worker's output line marker
    names: dict[str, str] = {}
    roots = [ROOT / "core" / "fmest", *sorted((ROOT / "plugins").glob("*/fmest_*"))]
    for root in roots:
        for path in root.rglob("*.py"):
            for name in set(pattern.findall(path.read_text(encoding="utf-8"))) - not_variables:
                names.setdefault(name, str(path.relative_to(ROOT)))
    assert "FMEST_DISABLE_PLUGINS" in names     # the scan finds what it should
    missing = {n: where for n, where in names.items() if f"`{n}`" not in text}
    assert missing == {}
