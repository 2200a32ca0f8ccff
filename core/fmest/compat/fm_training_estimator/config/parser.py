"""``parse`` (``fm_training_estimator/config/parser.py`` @ 1d04f05): a flat config (the format
of the original's CLI, REST route and web form: every field of every block at the top level)
as its six dataclasses.

The original parses with transformers' ``HfArgumentParser.parse_dict``, logs any error and
returns ``None``; this one raises :class:`fmest.errors.InputError` naming the keys no block
has, with the accepted names. :func:`flat_to_estimate_input` gives the same config as an
``EstimateInput`` dict, which is how the SDK, CLI and REST route answer it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Dict, Tuple, Union

from fmest.errors import InputError

#: the blocks in the original's parse order: a key two blocks share goes to the first
#: (``output_dir`` aside, no field is shared)
BLOCK_ORDER = ("fm", "hf_training", "infra", "data", "peft_lora", "peft_qlora")


def training_argument_names() -> tuple[str, ...]:
    """The fields of transformers' ``TrainingArguments`` (and ``output_dir``), read from the
    installed transformers' source without importing it (the import loads peft and torch:
    seconds); imported only when the source cannot be read that way."""
    return _training_argument_names()


@functools.lru_cache(maxsize=1)
def _training_argument_names() -> tuple[str, ...]:
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec("transformers")
        origin = spec.origin if spec is not None else None
    except (ImportError, ValueError):
        origin = None
    if origin:
        path = os.path.join(os.path.dirname(origin), "training_args.py")
        try:
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
        except (OSError, SyntaxError, ValueError):
            tree = None
        for node in (tree.body if tree is not None else []):
            if isinstance(node, ast.ClassDef) and node.name == "TrainingArguments":
                names = [n.target.id for n in node.body if isinstance(n, ast.AnnAssign)
                         and isinstance(n.target, ast.Name)
                         and not n.target.id.startswith("_")
                         and "ClassVar" not in ast.unparse(n.annotation)]
                if names:
                    return tuple(dict.fromkeys(["output_dir", *names]))
    from fmest.compat.fm_training_estimator.config import arguments as a

    return tuple(f.name for f in dataclasses.fields(a.HFTrainingArguments) if f.init)


def _block_fields() -> dict[str, tuple[str, ...]]:
    from fmest.compat.fm_training_estimator.config import blocks as b

    classes = {"fm": b.FMArguments, "infra": b.InfraArguments, "data": b.DataArguments,
               "peft_lora": b.PeftLoraConfig, "peft_qlora": b.PeftQLoraConfig}
    out = {name: tuple(f.name for f in dataclasses.fields(cls) if f.init)
           for name, cls in classes.items()}
    out["hf_training"] = training_argument_names()
    return out


def _read(config: Union[Dict, str, os.PathLike]) -> dict:
    if isinstance(config, (str, os.PathLike)):
        from fmest.compat.fm_training_estimator.utils import unmarshal

        path = os.fspath(config)
        if not os.path.isfile(path):
            raise InputError("config", "no such file", value=path)
        data = unmarshal(path)
        return {} if data is None else data
    if not isinstance(config, dict):
        raise InputError("config", "provided config should be either path to a config file "
                         "or a python dict", value=type(config).__name__)
    return config


def split_flat(config: Union[Dict, str, os.PathLike]) -> dict[str, dict]:
    """A flat config's keys grouped by block (``{"fm": {...}, "hf_training": {...}}``)."""
    data = _read(config)
    if not isinstance(data, dict):
        raise InputError("config", "expected a mapping of keys to values",
                         value=type(data).__name__)
    fields = _block_fields()
    owner: dict[str, str] = {}
    for block in reversed(BLOCK_ORDER):
        for name in fields[block]:
            owner[name] = block
    out: dict[str, dict] = {b: {} for b in BLOCK_ORDER}
    unknown: list[str] = []
    for key, value in data.items():
        found = owner.get(key)
        if found is None:
            unknown.append(str(key))
            continue
        out[found][key] = value
    if unknown:
        accepted = sorted(n for b in ("fm", "infra", "data", "peft_lora", "peft_qlora")
                          for n in fields[b]) + ["<any transformers TrainingArguments field>"]
        raise InputError(", ".join(sorted(map(str, unknown))),
                         "not a field of fm-training-estimator's config (FMArguments, "
                         "TrainingArguments, InfraArguments, DataArguments, PeftLoraConfig, "
                         "PeftQLoraConfig)", accepted=accepted)
    return out


def flat_to_estimate_input(config: Union[Dict, str, os.PathLike], *,
                           lookup_data_path: Any = None) -> dict:
    """A flat config as an ``EstimateInput`` dict (one job)."""
    blocks = split_flat(config)
    job = {name: values for name, values in blocks.items() if values}
    out: dict[str, Any] = {"job_configs": [job]}
    if lookup_data_path is not None:
        out["estimator_metadata"] = {"base_data_path": os.fspath(lookup_data_path),
                                     "method": "hybrid"}
    return out


def parse(config: Union[Dict, str, os.PathLike]) -> Tuple[Any, Any, Any, Any, Any, Any]:
    """``(FMArguments, HFTrainingArguments, InfraArguments, DataArguments, PeftLoraConfig,
    PeftQLoraConfig)`` of a flat config (dict or JSON/YAML file path)."""
    from fmest.compat.fm_training_estimator.config import arguments as a

    blocks = split_flat(config)
    return (a.FMArguments(**blocks["fm"]), a.HFTrainingArguments(**blocks["hf_training"]),
            a.InfraArguments(**blocks["infra"]), a.DataArguments(**blocks["data"]),
            a.PeftLoraConfig(**blocks["peft_lora"]), a.PeftQLoraConfig(**blocks["peft_qlora"]))
