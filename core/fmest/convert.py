"""The one cattrs converter at fmest's edges: dict/JSON <-> job, report -> dict.

Bad data fails with :class:`fmest.errors.InputError` whose field is the path of the bad value
(``training.micro_batch_size``) and, for enumerations, the accepted values. Unknown keys are
an error too: nothing a user gives is silently dropped.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from fmest.errors import InputError
from fmest.job import Hardware, Job, Options, Parallelism, Pricing, Training, Workload

_converter = cattrs.Converter(forbid_extra_keys=True)

_SECTIONS = {"training": Training, "parallelism": Parallelism, "hardware": Hardware,
             "workload": Workload, "pricing": Pricing, "options": Options}


def _num(value: Any, typ: type, path: str):
    if isinstance(value, bool):
        raise InputError(path, f"expected a {typ.__name__}", value=value)
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise InputError(path, f"expected a {typ.__name__}", value=value) from None
    if typ is int:
        if isinstance(value, float):
            if not value.is_integer():
                raise InputError(path, "expected a whole number", value=value)
            value = int(value)
        if not isinstance(value, int):
            raise InputError(path, "expected a whole number", value=value)
        return value
    if not isinstance(value, (int, float)):
        raise InputError(path, "expected a number", value=value)
    return float(value)


def _bool(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "0", "no", "off", ""):
        return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise InputError(path, "expected a boolean", value=value, accepted=("true", "false"))


def _structure_section(cls: type, data: Any, path: str):
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise InputError(path, "expected an object (mapping of field to value)", value=data)
    fields = {f.name: f for f in attrs.fields(attrs.resolve_types(cls))}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise InputError(f"{path}.{unknown[0]}", "unknown field", accepted=sorted(fields))
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        f = fields[name]
        fpath = f"{path}.{name}"
        typ = f.type
        origin_none = value is None
        base = typ
        args = getattr(typ, "__args__", ())
        if args and type(None) in args:  # Optional[X]
            base = next(a for a in args if a is not type(None))
        if origin_none:
            if base is typ:
                raise InputError(fpath, "may not be null")
            kwargs[name] = None
            continue
        if base is bool:
            kwargs[name] = _bool(value, fpath)
        elif base in (int, float):
            kwargs[name] = _num(value, base, fpath)
        elif base is str:
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise InputError(fpath, "expected a string", value=value)
            kwargs[name] = str(value)
        else:
            kwargs[name] = value
    try:
        return cls(**kwargs)
    except InputError as exc:
        raise InputError(f"{path}.{exc.field}", str(exc).split(": ", 1)[1]) from None
    except TypeError as exc:
        raise InputError(path, str(exc)) from None


def job_from_dict(data: Any) -> Job:
    """Build a :class:`Job` from a plain dict (as parsed from JSON).

    Layout: ``{"model": ..., "training": {...}, "parallelism": {...}, "hardware": {...},
    "workload": {...}, "pricing": {...}, "options": {...}}``. An fm-training-estimator
    ``EstimateInput`` (keys ``estimator``/``job_configs``) is accepted too, see
    :mod:`fmest.compat.fm_training_estimator`.
    """
    if isinstance(data, Job):
        return data
    if not isinstance(data, dict):
        raise InputError("job", "expected a JSON object", value=type(data).__name__)
    if "job_configs" in data or "estimator" in data:
        from fmest.compat.fm_training_estimator import jobs_from_estimate_input

        jobs, _ignored = jobs_from_estimate_input(data)
        return jobs[0]
    allowed = {"model", "model_config", *_SECTIONS}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InputError(unknown[0], "unknown field", accepted=sorted(allowed))
    if "model" not in data or not isinstance(data["model"], str) or not data["model"].strip():
        raise InputError("model", "a model name, local config path or Hub id is required")
    mc = data.get("model_config")
    if mc is not None and not isinstance(mc, dict):
        raise InputError("model_config", "expected a Hugging Face config object", value=mc)
    sections = {name: _structure_section(cls, data.get(name, {}), name)
                for name, cls in _SECTIONS.items()}
    return Job(model=data["model"].strip(), model_config=mc, **sections)


def job_from_json(text: str, *, source: str = "input") -> Job:
    """Parse JSON text into a job; malformed JSON names the source, line and column."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(source, f"malformed JSON at line {exc.lineno} column {exc.colno}: "
                         f"{exc.msg}") from None
    return job_from_dict(data)


def job_to_dict(job: Job) -> dict[str, Any]:
    """A plain, JSON-ready dict of a job (round-trips through :func:`job_from_dict`)."""
    data = _converter.unstructure(job)
    if data.get("model_config") is None:
        data.pop("model_config", None)
    return data


def unstructure(obj: Any) -> Any:
    """Plain data of any fmest attrs object (estimates, decisions, specs)."""
    return _converter.unstructure(obj)


__all__ = ["job_from_dict", "job_from_json", "job_to_dict", "unstructure",
           "ClassValidationError", "ForbiddenExtraKeysError", "IterableValidationError"]
