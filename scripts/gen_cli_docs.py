"""Regenerate the flag tables of docs/cli.md from the real parser (run after adding a flag).

Usage: python scripts/gen_cli_docs.py > docs/cli.md
"""

from __future__ import annotations

import argparse

from fmest.cli import build_parser
from fmest.engine import Engine
from fmest.flags import VALUE_NAMES

INTRO = """# Command line

`fmest COMMAND [flags]`. Bad input prints one line, `fmest: error: FIELD: what is wrong
(got VALUE); accepted: ...`, and exits with code 2. Boolean flags accept a bare flag or
`true`/`false`. Flag names are a contract other tools depend on: they are added to, never
renamed. Flags override values from `-f/--input-file` and `--config` files.

Conventions every command keeps (issue 15):

- **Output**: `--format table` (default) prints for people: rich tables on a terminal, the same
  columns as plain aligned text when piped or redirected (no ANSI escapes). `--format json` is
  the machine contract; `--format csv` (estimate, models, gpus, prices, plan) prints a header
  and one row per job/item with the JSON's numbers (`fmest estimate`: one row per job, units in
  the column names, one `component_<name>_bytes` column per memory component).
- **Errors**: with `--format json` an error is also a JSON object on stdout,
  `{"error": {"field": ..., "message": ..., "accepted": [...]}}` (the shape `fmest serve`
  answers with), and the exit code is 2; the one-line message still goes to stderr.
- **Exit codes**: 0 answered (also when the job does not fit), 2 bad input, 3 the job does not
  fit and `--fail-if-no-fit` was given (for schedulers), 130 interrupted.
- **Input**: `-f -` reads the job (fmest JSON or an EstimateInput) from stdin.
- **Progress** of long runs (`fmest plan` searches, `fmest probe` sweeps, counting a dataset's
  tokens) goes to stderr only: a bar on a terminal, plain lines in a log.
- **Python**: `fmest.estimate(...)` returns a `Report` with `to_dict()`/`to_json()` (the
  `--format json` object), a one-line `repr` and `_repr_html_` for notebooks; the package ships
  `py.typed`.

This page is generated from the parser by `scripts/gen_cli_docs.py`; a test checks that every
flag is listed.
"""


def _rows(parser: argparse.ArgumentParser):
    for group in parser._action_groups:
        acts = [a for a in group._group_actions if a.option_strings and a.dest != "help"]
        if not acts:
            continue
        yield group.title, acts


def main() -> None:
    parser = build_parser(Engine().commands())
    print(INTRO)
    for name, (help_, p) in parser.fmest_commands.items():
        print(f"## `fmest {name}`\n\n{help_ or ''}\n")
        for title, acts in _rows(p):
            print(f"**{title}**\n\n| flag | values | meaning |\n|---|---|---|")
            for a in acts:
                flags = ", ".join(f"`{o}`" for o in a.option_strings)
                if a.nargs == 0:            # a switch: --flag alone
                    vals = ""
                elif a.choices:
                    vals = " / ".join(str(c) for c in a.choices)
                else:
                    vals = (a.metavar or VALUE_NAMES.get(a.type) or "value").replace("|", " / ")
                text = (a.help or "").replace("|", "/").replace("%%", "%")
                print(f"| {flags} | {vals} | {text} |")
            print()
    from fmest.bounds import markdown

    print(markdown(), end="")


if __name__ == "__main__":
    main()
