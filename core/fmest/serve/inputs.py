"""A request body -> the CLI's ``fmest estimate`` arguments, so the service reads input through
the CLI's own door and answers with the CLI's own ``--format json`` object.

A body is a JSON object holding the job in any form ``-f`` accepts (an fmest job or an
fm-training-estimator ``EstimateInput``), either under ``"input"`` or at the top level, plus
any ``fmest estimate`` flag by its JSON name: the flag without ``--`` and with ``_`` for ``-``
(``seq_len``, ``per_device_batch``, ``micro_batch``, ``gpu``, ``zero``, ...). Flags win over the
job, as on the command line. Each flag value goes through the flag's own argparse type and
choices, so the service accepts exactly what the CLI accepts and names the same field.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from fmest.errors import InputError

#: How the service names the request's job input in messages (``-f`` names its file).
INPUT_SOURCE = "request body"
#: Flags the service does not take from a body: files on the server's disk and output format.
SERVER_SIDE_FLAGS = frozenset({"input_file", "config", "config_format", "format", "plot",
                               "export", "export_dir", "help",
                               "fail_if_no_fit"})
#: Top-level keys that belong to the job itself (fmest layout or EstimateInput).
JOB_KEYS = frozenset({"model_config", "training", "parallelism", "hardware", "workload",
                      "pricing", "options", "estimator", "estimator_metadata",
                      "estimatorMetadata", "job_configs", "jobConfigs"})
_ESTIMATE_INPUT_KEYS = frozenset({"estimator", "estimator_metadata", "estimatorMetadata",
                                  "job_configs", "jobConfigs"})


def command_parser(name: str, commands: dict | None = None) -> argparse.ArgumentParser:
    """The sub-parser of ``fmest NAME``, exactly as the CLI builds it (``commands``: the
    plugin commands, as :meth:`fmest.engine.Engine.commands` returns them)."""
    from fmest.cli import build_parser

    parser = build_parser(commands)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@functools.lru_cache(maxsize=1)
def estimate_parser() -> argparse.ArgumentParser:
    """The ``fmest estimate`` sub-parser."""
    return command_parser("estimate")


def flag_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """JSON name -> argparse action: every long option (``--micro-batch`` -> ``micro_batch``)
    and every destination (``per_device_batch``) of a command."""
    out: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if action.dest in SERVER_SIDE_FLAGS:
            continue
        names = [action.dest] + [o[2:].replace("-", "_") for o in action.option_strings
                                 if o.startswith("--")]
        for name in names:
            out.setdefault(name, action)
    return out


def flag_groups(parser: argparse.ArgumentParser) -> list[tuple[str, list[argparse.Action]]]:
    """The CLI's argument groups (input, training, ...) with the flags the service takes."""
    groups = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions
                   if a.dest not in SERVER_SIDE_FLAGS and a.option_strings]
        if actions:
            groups.append((group.title, actions))
    return groups


def is_bool_flag(action: argparse.Action) -> bool:
    return action.nargs == "?" and action.const is True


def flag_name(action: argparse.Action) -> str:
    """The long option (``--seq-len``) of an action."""
    return next(o for o in action.option_strings if o.startswith("--"))


def convert_flag(name: str, action: argparse.Action, value: Any) -> Any:
    """One JSON value through the flag's argparse type and choices (what the CLI would do with
    ``--flag VALUE``; a list for flags taking one or more values); errors name the JSON field
    and, where known, the accepted values."""
    if value is None:
        return None
    if action.nargs in ("+", "*"):
        items = value if isinstance(value, list) else [value]
        if action.nargs == "+" and not items:
            raise InputError(name, "expected at least one value", value=value)
        return [_convert_value(name, action, item) for item in items]
    return _convert_value(name, action, value)


def _convert_value(name: str, action: argparse.Action, value: Any) -> Any:
    accepted = [True, False] if is_bool_flag(action) else (
        list(action.choices) if action.choices else None)
    if isinstance(value, (dict, list)):
        raise InputError(name, "expected a single value", value=value, accepted=accepted)
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    converted: Any = text
    if action.type is not None:
        try:
            converted = action.type(text)
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            message = str(exc) if isinstance(exc, argparse.ArgumentTypeError) else (
                f"expected {getattr(action.type, '__name__', 'a value')}")
            # argparse type errors already quote the value ("got '0'")
            raise InputError(name, message, value=None if "got" in message else value,
                             accepted=accepted) from None
    if action.choices is not None and converted not in action.choices:
        raise InputError(name, "not an accepted value", value=value, accepted=action.choices)
    return converted


def split_body(body: Any) -> tuple[Any, dict[str, Any]]:
    """``(job input or None, flags)`` of a request body."""
    if not isinstance(body, dict):
        raise InputError("body", "expected a JSON object: the job (fmest layout or "
                         "EstimateInput) and/or fmest estimate flags by JSON name",
                         value=type(body).__name__)
    body = dict(body)
    if "input" in body:
        job_input = body.pop("input")
        if job_input is not None and not isinstance(job_input, dict):
            raise InputError("input", "expected a JSON object (an fmest job or an "
                             "fm-training-estimator EstimateInput)", value=type(job_input).__name__)
    else:
        job_input = {k: body.pop(k) for k in list(body) if k in JOB_KEYS} or None
        if job_input is not None and "model" in body and not _ESTIMATE_INPUT_KEYS & set(job_input):
            job_input["model"] = body.pop("model")  # an fmest job names its model at the top
    return job_input, body


def args_from_body(parser: argparse.ArgumentParser, body: Any
                   ) -> tuple[argparse.Namespace, Any]:
    """The namespace ``fmest COMMAND --format json`` would parse from this body, and the job
    input that ``-f`` would read."""
    job_input, flags = split_body(body)
    args = parser.parse_args([])
    actions = flag_actions(parser)
    for name, value in flags.items():
        action = actions.get(name)
        if action is None:
            raise InputError(name, "unknown field: not a flag of this command (JSON names: the "
                             "flag without -- and with _ for -) nor a job section",
                             accepted=sorted(set(actions) | JOB_KEYS | {"input"}))
        setattr(args, action.dest, convert_flag(name, action, value))
    args.format = "json"
    return args, job_input


def estimate_args(body: Any) -> tuple[argparse.Namespace, Any]:
    """:func:`args_from_body` for ``fmest estimate``."""
    return args_from_body(estimate_parser(), body)
