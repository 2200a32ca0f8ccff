"""The ``fmest`` command line: the console entry point (:func:`entry`, :func:`main`).

The options come from the flag table (:mod:`fmest.flags`), the work from the use cases
(:mod:`fmest.api`), the text from the renderers (:mod:`fmest.output.report`, :mod:`fmest.output.render`);
this module parses, calls and prints, and nothing else imports it. Flags override values from
``-f/--input-file`` (a job JSON or fm-training-estimator ``EstimateInput``) and ``--config``
files; flags not given leave those values alone.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import re
import sys
from typing import Any, Callable, Optional, Sequence

from fmest.errors import FmestError, error_body, error_object

#: Exit code of ``--fail-if-no-fit`` when the job does not fit (2 is a usage or input error).
EXIT_NO_FIT = 3
#: Set by :func:`main` when the command line asks for ``--format json``: errors are then also
#: a JSON object on stdout (:func:`fmest.errors.error_object`, the service's shape).
_JSON_ERRORS: contextvars.ContextVar[bool] = contextvars.ContextVar("fmest_json_errors",
                                                                     default=False)


def wants_json(argv: Sequence[str]) -> bool:
    """True when ``argv`` asks for ``--format json`` (read before parsing, so that a flag
    argparse refuses is answered in JSON too)."""
    for i, arg in enumerate(argv):
        if arg == "--format" and i + 1 < len(argv) and argv[i + 1] == "json":
            return True
        if arg == "--format=json":
            return True
    return False


def argparse_error_object(message: str) -> dict:
    """An argparse refusal (``argument --seq-len/--x: ...``, ``invalid choice: 'x' (choose
    from 'a', 'b')``, ``the following arguments are required: --to``) as the JSON error."""
    from fmest.errors import json_field

    field = None
    match = re.match(r"argument (\S+?)(?:/\S+)?: (.*)$", message, re.S)
    if match:
        field, message = match.group(1), match.group(2)
    else:
        flags = re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", message)
        field = flags[0] if flags else None
    accepted: list = re.findall(r"did you mean (--[\w-]+)\?", message)
    choices = re.search(r"\(choose from (.*)\)", message)
    if choices:
        accepted = re.findall(r"'([^']*)'", choices.group(1)) or \
            [int(c) if c.strip().isdigit() else c.strip() for c in choices.group(1).split(",")]
    return error_body(json_field(field) if field else None, message, accepted)


def print_json_error(obj: dict) -> None:
    print(json.dumps(obj, indent=2, default=str))


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2 (no usage dump, no traceback); with
    ``--format json`` the error is also a JSON object on stdout. Flags are never abbreviated:
    a prefix (``--grad-ckpt``) is a mistyped flag with a did-you-mean, not silently another
    flag that begins with it (``--grad-ckpt-reduction``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        if _JSON_ERRORS.get():
            print_json_error(argparse_error_object(message))
        self.exit(2, f"fmest: error: {message} (see 'fmest {self.prog.split()[-1]} --help')\n"
                  if " " in self.prog else f"fmest: error: {message}\n")

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """argparse's, with a mistyped flag named with the closest real ones: ``unknown flag
        --seq-lenn; did you mean --seq-len?`` (one line, exit 2), said by the command's parser."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._command_parser(parsed)
            command.error(unknown_flags_message(extras, command))
        return parsed

    def _command_parser(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The sub-parser of the command ``parsed`` names (this parser without one)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices.get(str(getattr(parsed, action.dest, None)), self)
        return self


def _is_flag(arg: str) -> bool:
    return re.match(r"--?[A-Za-z]", arg) is not None


def unknown_flags_message(extras: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """The one-line refusal of the arguments ``parser`` did not take: each unknown flag with the
    closest flag it has (none when none is close), else argparse's own words."""
    unknown = list(dict.fromkeys(a.split("=", 1)[0] for a in extras if _is_flag(a)))
    if not unknown:
        return f"unrecognized arguments: {' '.join(extras)}"
    options = [o for o in parser._option_string_actions if o.startswith("--")]
    near = {flag: _closest(flag, options) for flag in unknown}
    if len(unknown) == 1:
        flag = unknown[0]
        return f"unknown flag {flag}" + (f"; did you mean {near[flag]}?" if near[flag] else "")
    return "unknown flags: " + ", ".join(
        flag + (f" (did you mean {near[flag]}?)" if near[flag] else "") for flag in unknown)


def _closest(flag: str, options: Sequence[str]) -> str | None:
    """The one option most like ``flag`` (difflib ratio at least 0.75), or None."""
    import difflib

    hits = difflib.get_close_matches(flag, options, n=1, cutoff=0.75)
    return hits[0] if hits else None


def _summarised(report, args) -> Any:
    """People get a summary of many ignored config keys; --explain and --format json list each
    key with its reason."""
    import attrs

    config_lines = [w for w in report.warnings if w.startswith("config key ignored: ")]
    if args.format == "json" or report.job.options.explain or len(config_lines) <= 3:
        return report
    rest = tuple(w for w in report.warnings if not w.startswith("config key ignored: "))
    note = (f"{len(config_lines)} config keys ignored (logging, paths, data and the like: no "
            "effect on memory, time or cost; --explain lists each with its reason)",)
    return attrs.evolve(report, warnings=rest + note)


def cmd_estimate(args: argparse.Namespace, engine_factory) -> int:
    from fmest import api
    from fmest.output.plot import check_plot_path, write_plot

    if args.plot:
        check_plot_path(args.plot)  # a bad file name or folder fails before any work
    if getattr(args, "compare", None):   # variants side by side (api.compare_output)
        variants = api.compare_output(args, engine_factory())
        print(json.dumps(variants, indent=2, default=str) if args.format == "json"
              else api.compare_text(variants))
        return _fit_exit(args, [(v.get("memory") or {}).get("fits") for v in variants],
                         [(v.get("memory") or {}).get("fits_probability") for v in variants])
    if args.format == "fm-training-estimator":
        from fmest.compat.fm_training_estimator.sdk import adr_output

        print(json.dumps(adr_output(api.read_jobs(args)[0][0], engine_factory()), indent=2))
        return 0
    from fmest.compat import llm_memory_estimator as llmest

    probing = llmest.wants_probe(args)
    if probing:
        llmest.probe_device(args)   # a device this machine lacks fails before any work
    if args.format in ("json", "csv"):
        out = api.estimate_output(args, engine_factory())
        if probing:   # the LLM/VLM GPU Memory Estimator's --probe: measured beside estimated
            measured = llmest.probe_jobs(args, [j for j, _ in api.read_jobs(args)])
            for target, row in zip(out["jobs"] if "jobs" in out else [out], measured,
                                   strict=True):
                target["probe"] = row
        if args.format == "json":
            print(json.dumps(out, indent=2, default=str))
        else:
            from fmest.output.report import estimate_csv

            sys.stdout.write(estimate_csv(out))
        if args.plot:
            write_plot(out, args.plot)
        jobs = out["jobs"] if "jobs" in out else [out]
        return _fit_exit(args, [(j.get("memory") or {}).get("fits") for j in jobs],
                         [(j.get("memory") or {}).get("fits_probability") for j in jobs])
    report = api.estimate_jobs(api.read_jobs(args), engine=engine_factory())
    if args.plot:
        write_plot(report, args.plot)
    reports = report.all_reports
    from fmest.output.render import render_table as table
    from fmest.output.report import report_table

    for r in reports:
        if len(reports) > 1:
            print(f"{'' if r is report else chr(10)}== job {r.input.job_index + 1} of "
                  f"{len(reports)}: {r.job.model} ==")
        print(report_table(_summarised(r, args), explain=bool(r.job.options.explain)))
        if probing:
            print("\n" + llmest.probe_text(llmest.probe_jobs(args, [r.job])))
        counted = r.input is not None and "workload.dataset_tokens" in r.input.origins and \
            not str(r.input.origins["workload.dataset_tokens"]).startswith("--")
        if r.input is not None and (r.input.files or counted) and r.job.options.explain:
            print("\nWhere each setting came from (flags override these):")
            print(table(["field", "origin"], r.input.origins.items(), indent="  "))
    from fmest.output.report import fit_probability

    return _fit_exit(args, [r.fits for r in reports], [fit_probability(r) for r in reports],
                     [r.job.options.fit_confidence for r in reports])


def _fit_exit(args: argparse.Namespace, fits: list, probabilities: Optional[list] = None,
              levels: Optional[list] = None) -> int:
    """``--fail-if-no-fit``: exit 3 when a job does not fit (for schedulers); else 0. A job
    whose answer has an interval fails below ``--fit-confidence`` (default 0.9) P(fit)."""
    if not getattr(args, "fail_if_no_fit", False):
        return 0
    from fmest.estimates import DEFAULT_FIT_CONFIDENCE

    given = getattr(args, "fit_confidence", None)
    probs = probabilities or [None] * len(fits)
    for i, (f, p) in enumerate(zip(fits, probs, strict=True)):
        level = given or (levels[i] if levels and levels[i] else DEFAULT_FIT_CONFIDENCE)
        if (p is not None and p < level) or (p is None and f is False):
            shown = f" (P(fit) {p * 100:.0f} % < {level * 100:g} %)" if p is not None else ""
            print(f"fmest: the job does not fit{shown} (--fail-if-no-fit)", file=sys.stderr)
            return EXIT_NO_FIT
    return 0


def cmd_export(args: argparse.Namespace, engine_factory) -> int:
    """``fmest export --to FORMAT``: the job (flags, -f, --config) as a tool's config file(s);
    with ``--output-dir`` each file is written atomically (a kill leaves the old file or the
    new one) and a directory that cannot be written fails before the work, naming the flag."""
    import os

    from fmest.api import export_files
    from fmest.atomic import check_writable_dir, write_text_atomic

    if args.output_dir:  # a path under a file, no permission: the flag's problem, at once
        check_writable_dir(args.output_dir, field="--output-dir")
    files = export_files(args, engine_factory())
    if args.output_dir:
        for name, text in files.items():
            path = os.path.join(args.output_dir, name)
            write_text_atomic(path, text, field="--output-dir")
            print(f"wrote {path}")
    elif len(files) == 1:
        sys.stdout.write(next(iter(files.values())))
    else:
        for name, text in files.items():
            sys.stdout.write(f"# ==> {name} <==\n{text}")
    return 0


def cmd_models(args, engine_factory) -> int:
    """The model registry: every plugin's presets (not a built-in table)."""
    from fmest.api import models_rows
    from fmest.output.render import csv_text, render_table

    rows = models_rows(engine_factory().registries)
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    if args.format == "csv":
        sys.stdout.write(csv_text(MODELS_CSV_FIELDS, rows))
        return 0
    if not rows:
        print("no model presets registered; a local config.json or model folder works.")
        return 0
    print(render_table(["name", "type", "aliases"],
                       [(r["name"], r["model_type"], ", ".join(r["aliases"][:3])) for r in rows]))
    print(f"\n{len(rows)} presets; a local config.json or model folder also works.")
    return 0


#: ``fmest models --format csv`` columns (the JSON rows' keys; aliases joined with ``;``).
MODELS_CSV_FIELDS = ("name", "model_type", "aliases", "source", "retrieved", "plugin")


def cmd_gpus(args, engine_factory) -> int:
    from fmest.api import gpus_rows
    from fmest.output.render import Column, csv_text, render_table

    engine = engine_factory()
    gpus = engine.registries.gpus.values()
    if args.format == "json":
        print(json.dumps(gpus_rows(engine.registries), indent=2))
        return 0
    if args.format == "csv":
        rows = gpus_rows(engine.registries)
        fields = list(dict.fromkeys(k for r in rows for k in r))  # the JSON keys, in order
        sys.stdout.write(csv_text(fields, rows))
        return 0

    def tf(x):
        return f"{x / 1e12:.1f}" if x else "-"

    print(render_table(
        [Column(name="name"), Column(name="mem GiB", align="right"),
         Column(name="HBM TB/s", align="right"), Column(name="bf16 TF", align="right"),
         Column(name="fp8 TF", align="right"), Column(name="aliases")],
        [(g.name, f"{g.memory_bytes / 1024**3:.0f}",
          f"{g.hbm_bytes_per_s / 1e12:.2f}" if g.hbm_bytes_per_s else "-",
          tf(g.bf16_flops_per_s), tf(g.fp8_flops_per_s), ", ".join(g.aliases[:4]))
         for g in gpus]))
    return 0


def cmd_plugins(args, engine_factory) -> int:
    from importlib.metadata import entry_points

    from fmest.plugins import plugin_hooks

    engine = engine_factory()
    hooks = plugin_hooks(engine.pm)
    # learned-model bundles are packages of their own (entry-point group fmest.learned_models);
    # listed by name without importing them
    bundles = {ep.name: ep.value for ep in entry_points(group="fmest.learned_models")}
    if args.format == "json":
        print(json.dumps({"plugins": hooks, "learned_models": bundles,
                          "load_errors": [str(e) for e in engine.load_errors]}, indent=2))
        return 0
    from fmest.output.render import render_table

    print(render_table(["plugin", "hooks"],
                       [(name, ", ".join(h.removeprefix("fmest_") for h in hs))
                        for name, hs in sorted(hooks.items())]))
    if bundles:
        print("\nlearned-model bundles (--learned-model NAME; details: fmest learned-models)")
        print(render_table(["bundle", "entry point"], sorted(bundles.items())))
    for err in engine.load_errors:
        print(f"error: {err}")
    return 0


#: The flags most jobs set, shown as ``--help``'s usage of the commands with the long flag table
#: instead of argparse's 50 lines naming every flag (each one a real flag: tests/test_cli.py).
COMMON_FLAGS = ("[--model NAME]", "[-f JOB.json]", "[--config FILE]", "[--gpu NAME]",
                "[--gpus-per-node N]", "[--nodes N]", "[--seq-len N]", "[--per-device-batch N]",
                "[--technique full|lora|qlora|...]", "[--zero 0|1|2|3 | --fsdp full_shard]",
                "[--grad-checkpoint true|false]", "[--dataset-tokens N]")


def _short_usage(command: str, *extra: str) -> str:
    lines = [f"fmest {command}"]
    for item in (*COMMON_FLAGS, *extra, "[FLAG ...]"):   # whole items per line, under 88 chars
        if len("usage: ") + len(lines[-1]) + 1 + len(item) > 88:
            lines.append(" " * 6)
        lines[-1] += " " + item
    return "\n".join(lines) + ("\n\nThe common flags above; every flag is listed below by "
                               "group, and in docs/cli.md.")


SHORT_USAGE = {"estimate": _short_usage("estimate", "[--format table|json|csv]"),
               "export": _short_usage("export",
                                      "--to deepspeed|accelerate|axolotl|training-args")}


def build_parser(commands: dict | None = None, *,
                 only: str | None = None) -> argparse.ArgumentParser:
    """The ``fmest`` parser: the built-in commands from the flag table, then the plugins'
    ``commands`` (name -> (help, add_arguments, run), :meth:`fmest.engine.Engine.commands`).
    ``parser.fmest_commands`` maps each command name to its help and sub-parser. With
    ``only``, every command is listed but only that one gets its arguments (``fmest --help``
    and ``fmest plan`` need not import what the other commands' arguments need)."""
    from fmest import __version__

    parser = _Parser(prog="fmest", description="Estimate per-GPU memory, step and total time, "
                     "tokens/s and dollar cost of LLM training runs before running them.")
    parser.add_argument("--version", action="version", version=f"fmest {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    table: dict[str, tuple[str, argparse.ArgumentParser]] = {}

    # ``add`` fills a sub-parser; what it returns (argparse's Action) is ignored
    def command(name: str, help: str, add: Callable[[argparse.ArgumentParser], object]) -> None:
        table[name] = (help, sub.add_parser(name, help=help, usage=SHORT_USAGE.get(name)))
        if only is None or only == name:
            add(table[name][1])

    def listing_format(*formats: str) -> Callable[[argparse.ArgumentParser], object]:
        return lambda p: p.add_argument("--format", choices=formats, default="table")

    def job_flags(table: str) -> Callable[[argparse.ArgumentParser], object]:
        def add(p: argparse.ArgumentParser) -> None:
            from fmest import flags

            flags.add_arguments(p, getattr(flags, table))
        return add

    command("estimate", "estimate memory, time, throughput and cost of a job",
            job_flags("ESTIMATE_FLAGS"))
    command("export", "write the job as a DeepSpeed, accelerate, axolotl or TrainingArguments "
            "config", job_flags("EXPORT_FLAGS"))
    command("models", "list the shipped model presets", listing_format("table", "json", "csv"))
    command("gpus", "list the known accelerators", listing_format("table", "json", "csv"))
    command("plugins", "list the plugins and the hooks they implement",
            listing_format("table", "json"))
    for name, (help_, add_args, _run) in (commands or {}).items():
        command(name, help_, add_args)
    parser.fmest_commands = table  # type: ignore[attr-defined]  # read by docs generators
    return parser


def main(argv: Sequence[str] | None = None, *, engine=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    token = _JSON_ERRORS.set(wants_json(argv))
    try:
        return _main(argv, engine)
    finally:
        _JSON_ERRORS.reset(token)


def _main(argv: list[str], engine) -> int:
    box: dict = {"engine": engine, "pm": engine.pm if engine is not None else None}

    def plugin_manager():
        if box["pm"] is None:
            from fmest.plugins import new_plugin_manager

            box["pm"] = new_plugin_manager()
        return box["pm"]

    def engine_factory():
        if box["engine"] is None:   # the plugins loaded for the command line, reused
            from fmest.engine import Engine

            box["engine"] = Engine(plugin_manager())
        return box["engine"]

    try:
        builtin = {"estimate": cmd_estimate, "models": cmd_models, "gpus": cmd_gpus,
                   "plugins": cmd_plugins, "export": cmd_export}
        first = next((a for a in argv if not a.startswith("-")), None)
        commands: dict = {}
        if first not in builtin:   # the plugins' commands; an engine only if one runs
            from fmest.plugins import plugin_commands

            errors = engine._errors if engine is not None else \
                plugin_manager().fmest_load_errors
            commands = plugin_commands(plugin_manager(), errors)
        # "": list every command, build none's arguments (fmest --help, a bare fmest)
        parser = build_parser(commands, only=first or "")
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        if args.command in builtin:
            return builtin[args.command](args, engine_factory)
        return commands[args.command][2](args, engine_factory())
    except FmestError as exc:
        if _JSON_ERRORS.get():  # machines read the object; people still see the line
            print_json_error(error_object(exc))
        print(f"fmest: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def entry() -> None:  # console script
    sys.exit(main())
