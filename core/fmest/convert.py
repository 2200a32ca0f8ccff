"""The one private cattrs converter at fmest's edges: dict/JSON <-> job, report -> dict.

Structure hooks accept what JSON, YAML and command lines give: numbers as strings (``"1024"``,
``"1e9"``), booleans as strings (``"true"``/``"yes"``/``"on"``/``"1"`` are true;
``"false"``/``"no"``/``"off"``/``"0"``/``""`` are false, never truthiness). Bad data fails with
:class:`fmest.errors.InputError` whose field is the path of the bad value
(``training.micro_batch_size``) and, for enumerations, the accepted values. Unknown keys are an
error too: nothing a user gives is silently dropped.

This module reads fmest's own layout only; other tools' formats are readers in
:mod:`fmest.inputs` (which uses this converter once, after merging every source).
"""

from __future__ import annotations

import json
import typing
from typing import Any

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from fmest.errors import InputError
from fmest.job import (
    Calibration,
    Hardware,
    Inference,
    Job,
    Options,
    Parallelism,
    Pricing,
    Training,
    Workload,
)

_converter = cattrs.Converter(forbid_extra_keys=True)

SECTIONS = {"training": Training, "parallelism": Parallelism, "hardware": Hardware,
            "workload": Workload, "pricing": Pricing, "options": Options,
            "inference": Inference, "calibration": Calibration}
TOP_FIELDS = ("model", "model_config", "mode")

TRUE_STRINGS = ("true", "1", "yes", "on")
FALSE_STRINGS = ("false", "0", "no", "off", "")


class _Bad(ValueError):
    """A value a structure hook rejects: the message and accepted values, path added later."""

    def __init__(self, message: str, value: Any, accepted=None) -> None:
        super().__init__(message)
        self.message, self.value, self.accepted = message, value, accepted


def structure_bool(value: Any, _type=bool) -> bool:
    """``true``/``yes``/``on``/``1`` and ``false``/``no``/``off``/``0``/empty, any case."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in TRUE_STRINGS:
            return True
        if text in FALSE_STRINGS:
            return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _Bad("expected a boolean", value, ("true", "false"))


def _number(value: Any, kind: str) -> float | int:
    if isinstance(value, bool):
        raise _Bad(f"expected a {kind}", value)
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise _Bad(f"expected a {kind}", value) from None
    if not isinstance(value, (int, float)):
        raise _Bad("expected a number", value)
    return value


def structure_int(value: Any, _type=int) -> int:
    number = _number(value, "int")
    if isinstance(number, float):
        if not number.is_integer():
            raise _Bad("expected a whole number", value)
        number = int(number)
    return number


def structure_float(value: Any, _type=float) -> float:
    return float(_number(value, "float"))


def structure_str(value: Any, _type=str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _Bad("expected a string", value)
    return str(value)


def _structure_str_tuple(value: Any, _type) -> Any:
    # the field's own converter splits "a,b" strings; lists are checked item by item
    if isinstance(value, str):
        return value
    if not isinstance(value, (list, tuple)):
        raise _Bad("expected a list of names or a comma-separated string", value)
    return tuple(structure_str(v) for v in value)


def _structure_mapping(value: Any, _type) -> dict:
    if not isinstance(value, dict):
        raise _Bad("expected an object (mapping of keys to values)", value)
    return dict(value)


_converter.register_structure_hook(bool, structure_bool)
_converter.register_structure_hook(int, structure_int)
_converter.register_structure_hook(float, structure_float)
_converter.register_structure_hook(str, structure_str)
_converter.register_structure_hook_func(lambda t: t == tuple[str, ...], _structure_str_tuple)
_converter.register_structure_hook_func(
    lambda t: t is dict or typing.get_origin(t) is dict, _structure_mapping)


def _first_error(exc: BaseException, path: str) -> InputError:
    """The first leaf of a cattrs error tree as an :class:`InputError` at its path."""
    if isinstance(exc, ClassValidationError):
        noted, plain = exc.group_exceptions()
        if noted:
            inner, note = noted[0]
            return _first_error(inner, f"{path}.{note.name}" if path else note.name)
        inner = plain[0]  # raised by the class itself (an attrs validator)
        if isinstance(inner, InputError):
            return inner.at(f"{path}.{inner.field}" if path else inner.field)
        return _first_error(inner, path)
    if isinstance(exc, IterableValidationError):
        indexed, rest = exc.group_exceptions()
        if indexed:
            inner, at = indexed[0]
            return _first_error(inner, f"{path}[{at.index}]")
        return _first_error(rest[0], path)
    if isinstance(exc, ForbiddenExtraKeysError):
        accepted = sorted(a.name for a in attrs.fields(exc.cl))
        extra = sorted(exc.extra_fields)[0]
        return InputError(f"{path}.{extra}" if path else extra, "unknown field",
                          accepted=accepted)
    if isinstance(exc, _Bad):
        return InputError(path, exc.message, value=exc.value, accepted=exc.accepted)
    if isinstance(exc, InputError):  # an attrs validator: its field is the attribute name
        return exc.at(path) if path else exc
    return InputError(path or "job", f"{type(exc).__name__}: {exc}")


def _field_types(cls: type) -> dict[str, Any]:
    return {f.name: f.type for f in attrs.fields(attrs.resolve_types(cls))}


def _section(cls: type, data: Any, path: str):
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise InputError(path, "expected an object (mapping of field to value)", value=data)
    types = _field_types(cls)
    for name, value in data.items():
        if value is None and name in types and type(None) not in typing.get_args(types[name]):
            raise InputError(f"{path}.{name}", "may not be null")
    try:
        return _converter.structure(data, cls)
    except InputError as exc:  # a validator: prefix the section
        raise exc.at(f"{path}.{exc.field}") from None
    except (ClassValidationError, _Bad, ForbiddenExtraKeysError) as exc:
        raise _first_error(exc, path) from None


def job_from_dict(data: Any) -> Job:
    """Build a :class:`Job` from a plain dict in fmest's layout (as parsed from JSON).

    Layout: ``{"model": ..., "model_config": {...}, "training": {...}, "parallelism": {...},
    "hardware": {...}, "workload": {...}, "pricing": {...}, "options": {...}}``. Another tool's
    format (an fm-training-estimator ``EstimateInput``, a config file) is read by
    :func:`fmest.inputs.read_input`.
    """
    if isinstance(data, Job):
        return data
    if not isinstance(data, dict):
        raise InputError("job", "expected a JSON object", value=type(data).__name__)
    if "job_configs" in data or "jobConfigs" in data or "estimator" in data \
            or "estimator_metadata" in data:
        raise InputError("job_configs", "this is an fm-training-estimator EstimateInput, which "
                         "may hold several jobs; read it with fmest.inputs.read_input (or pass "
                         "it to fmest.estimate / fmest estimate -f)")
    allowed = {*TOP_FIELDS, *SECTIONS}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InputError(unknown[0], "unknown field", accepted=sorted(allowed))
    model = data.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InputError("model", "a model name, local config path or Hub id is required")
    config = data.get("model_config")
    if config is not None and not isinstance(config, dict):
        raise InputError("model_config", "expected a Hugging Face config object", value=config)
    hw = data.get("hardware")
    for key in ("torch_version", "cuda_version"):
        value = hw.get(key) if isinstance(hw, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # YAML and JSON read 2.10 as the number 2.1: the release would be misread silently
            raise InputError(f"hardware.{key}", "give the version as a string (quoted in YAML), "
                             "e.g. '2.10': a number loses its trailing zeros", value=value)
    sections = {name: _section(cls, data.get(name, {}), name) for name, cls in SECTIONS.items()}
    mode = data.get("mode", "training")
    return Job(model=model.strip(), model_config=config,
               mode=mode.strip().lower() if isinstance(mode, str) else mode, **sections)


def structure_field(path: str, value: Any) -> Any:
    """One job field (``training.seq_len``) in the type the job holds, by the same hooks as
    :func:`job_from_dict` (validators of ranges and choices run when the job is built)."""
    if "." not in path:
        if path == "model":
            return structure_str(value)
        return value
    section, name = path.split(".", 1)
    types = _field_types(SECTIONS[section])
    typ = types[name]
    args = typing.get_args(typ)
    if value is None:
        return None
    if args and type(None) in args:
        typ = next(a for a in args if a is not type(None))
    try:
        return _converter.structure(value, typ)
    except _Bad as exc:
        raise InputError(path, exc.message, value=exc.value, accepted=exc.accepted) from None


def job_from_json(text: str, *, source: str = "input") -> Job:
    """Parse JSON text in fmest's layout into a job; malformed JSON names the source, line
    and column."""
    return job_from_dict(parse_json(text, source=source))


def parse_json(text: str, *, source: str = "input") -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(source, f"malformed JSON at line {exc.lineno} column {exc.colno}: "
                         f"{exc.msg}") from None


def job_to_dict(job: Job) -> dict[str, Any]:
    """A plain, JSON-ready dict of a job (round-trips through :func:`job_from_dict`)."""
    data = _converter.unstructure(job)
    if data.get("model_config") is None:
        data.pop("model_config", None)
    return data


def unstructure(obj: Any) -> Any:
    """Plain data of any fmest attrs object (estimates, decisions, specs)."""
    return _converter.unstructure(obj)


__all__ = ["job_from_dict", "job_from_json", "job_to_dict", "unstructure", "structure_field",
           "structure_bool", "parse_json", "SECTIONS"]
