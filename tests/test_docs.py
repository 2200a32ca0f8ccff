"""Docs cannot drift: every hook and each of its arguments is documented."""

from __future__ import annotations

import inspect
from pathlib import Path

from fmest import hookspecs

DOCS = Path(__file__).resolve().parents[1] / "docs"


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
