"""The original's CLI (``fm_training_estimator/ui/cli.py`` @ 1d04f05), answered by fmest:

    python -m fmest.compat.fm_training_estimator.ui.cli CONFIG [-l LOOKUP_CSV] [-m MODEL]
        [-o OUTPUT_PATH] [--log_level LEVEL]
    fmest fm-training-estimator CONFIG ...          (the same command)

``CONFIG`` is the original's flat JSON/YAML config (every field at the top level) or an
``EstimateInput`` (``-f/--input_file_path``, the ADR's spelling, names it too). The answer is
the flat JSON dict of :func:`fmest.compat.fm_training_estimator.ui.core.run`, printed or
written to ``--output_path`` (atomically). The original's flag names are kept (``--output_path``,
``--log_level``, ``--lookup_data_path``/``-l``, ``--model_path``/``-m``), with the dashed
spellings beside them.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Optional

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("config", nargs="?", default=None,
                   help="flat config (JSON/YAML) or EstimateInput JSON")
    p.add_argument("-f", "--input_file_path", "--input-file-path", dest="input_file_path",
                   default=None, help="the config file (instead of CONFIG)")
    p.add_argument("-o", "--output_path", "--output-path", dest="output_path", default="",
                   help="write the JSON answer to this file instead of printing it")
    p.add_argument("--log_level", "--log-level", dest="log_level", default="INFO",
                   type=str.upper, choices=LOG_LEVELS, help="logging level (default INFO)")
    p.add_argument("-l", "--lookup_data_path", "--lookup-data-path", dest="lookup_data_path",
                   default=None, help="CSV of measured runs (formats v1/v2/v3): exact rows "
                   "answer first, then a model trained on them")
    p.add_argument("-m", "--model_path", "--model-path", dest="model_path", default=None,
                   help="an fmest learned bundle directory (fm-training-estimator's xgboost "
                   "zips are not read: a warning says so)")
    return p


def run_command(args: argparse.Namespace, engine=None) -> int:
    from fmest.compat.fm_training_estimator.ui.core import run
    from fmest.errors import FmestError

    config = args.input_file_path or args.config
    if not config:
        print("error: config: give the config file (CONFIG or -f/--input_file_path)",
              file=sys.stderr)
        return 2
    if args.input_file_path and args.config:
        print("error: config: give CONFIG or -f/--input_file_path, not both", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level)
    try:
        output = run(config, lookup_data_path=args.lookup_data_path,
                     model_path=args.model_path, engine=engine)
    except FmestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(output, indent=4, default=float)
    if not args.output_path:
        print(text)
        return 0
    from fmest.atomic import write_text_atomic

    try:
        write_text_atomic(args.output_path, text + "\n", field="--output_path")
    except FmestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    logging.info("writing the output to a file at %s", args.output_path)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m fmest.compat.fm_training_estimator.ui.cli",
        description="fm-training-estimator's CLI, answered by fmest (docs/compat.md)")
    return run_command(add_arguments(p).parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
