"""A request body -> the options of ``fmest estimate`` (or ``plan``), read through the same flag
table as the command line (:mod:`fmest.flags`), so the service reads input through the CLI's
own door and answers with the CLI's own ``--format json`` object.

A body is a JSON object holding the job in any form ``-f`` accepts (an fmest job or an
fm-training-estimator ``EstimateInput``), either under ``"input"`` or at the top level, plus
any ``fmest estimate`` flag by its JSON name: the flag without ``--`` and with ``_`` for ``-``
(``seq_len``, ``per_device_batch``, ``micro_batch``, ``gpu``, ``zero``, ...). Flags win over the
job, as on the command line. Each flag value goes through the row's own parser and choices
(:func:`fmest.flags.convert`), so the service accepts exactly what the CLI accepts and names the
same field. Rows marked ``server_side`` (files on the server's disk, output format) are not
taken from a body. The body itself is parsed by :func:`parse_json`, within a nesting depth and
an integer size; which files a body may name is :mod:`fmest.serve.files`'s.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from fmest import flags as flag_table
from fmest.errors import InputError
from fmest.flags import Flag, convert, defaults, json_flags

#: How the service names the request's job input in messages (``-f`` names its file).
INPUT_SOURCE = "request body"
#: Top-level keys that belong to the job itself (fmest layout or EstimateInput).
JOB_KEYS = frozenset({"model_config", "training", "parallelism", "hardware", "workload",
                      "pricing", "options", "estimator", "estimator_metadata",
                      "estimatorMetadata", "job_configs", "jobConfigs"})
_ESTIMATE_INPUT_KEYS = frozenset({"estimator", "estimator_metadata", "estimatorMetadata",
                                  "job_configs", "jobConfigs"})
#: Deepest nesting a body may have (the top-level object is 1). A job is 3 levels deep, an
#: EstimateInput 4; Python's parser raises RecursionError near 1,000, so without a limit a
#: deep body is a server error.
MAX_JSON_DEPTH = 64
#: Most digits an integer in a body may have. Counts reach 1e15 (16 digits); Python refuses to
#: convert more than 4,300 digits (ValueError) and converts in quadratic time below that.
MAX_INT_DIGITS = 40
_TOO_DEEP = f"JSON nested deeper than {MAX_JSON_DEPTH} levels (the limit)"


def parse_json(raw: bytes) -> Any:
    """A request body's JSON, within :data:`MAX_JSON_DEPTH` and :data:`MAX_INT_DIGITS`; every
    problem is an :class:`InputError` on ``body``."""
    try:
        data = json.loads(raw, parse_constant=_no_constant, parse_int=_bounded_int)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = (f" at line {exc.lineno} column {exc.colno}: {exc.msg}"
                 if isinstance(exc, json.JSONDecodeError) else ": not UTF-8")
        raise InputError("body", f"malformed JSON{where}") from None
    except RecursionError:
        raise InputError("body", _TOO_DEEP) from None
    if _deeper_than(data, MAX_JSON_DEPTH):
        raise InputError("body", _TOO_DEEP)
    return data


def _no_constant(name: str) -> Any:
    """Python's json reads NaN and Infinity; JSON has no such numbers."""
    raise InputError("body", f"{name} is not a JSON number", accepted=["finite numbers"])


def _bounded_int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise InputError("body", f"an integer of {digits} digits; the limit is "
                         f"{MAX_INT_DIGITS} digits")
    return int(text)


def _deeper_than(data: Any, limit: int) -> bool:
    """Whether ``data`` nests containers deeper than ``limit`` (level by level, no recursion;
    a 1 MiB body of empty lists takes about as long as parsing it)."""
    level = [data] if isinstance(data, (dict, list)) else []
    depth = 1
    while level:
        if depth > limit:
            return True
        below: list = []
        for item in level:
            below += [child for child in (item.values() if isinstance(item, dict) else item)
                      if isinstance(child, (dict, list))]
        level, depth = below, depth + 1
    return False


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


def args_from_body(flags: tuple[Flag, ...], body: Any) -> tuple[argparse.Namespace, Any]:
    """The options ``fmest COMMAND --format json`` would parse from this body (``flags``: the
    command's rows of the flag table), and the job input that ``-f`` would read."""
    job_input, given = split_body(body)
    values = defaults(flags)
    names = json_flags(flags)
    for name, value in given.items():
        flag = names.get(name)
        if flag is None:
            raise InputError(name, "unknown field: not a flag of this command (JSON names: the "
                             "flag without -- and with _ for -) nor a job section",
                             accepted=sorted(set(names) | JOB_KEYS | {"input"}))
        values[flag.dest] = convert(name, flag, value)
    values["format"] = "json"
    return argparse.Namespace(**values), job_input


def estimate_args(body: Any) -> tuple[argparse.Namespace, Any]:
    """:func:`args_from_body` for ``fmest estimate``."""
    return args_from_body(flag_table.ESTIMATE_FLAGS, body)
