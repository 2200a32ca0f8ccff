"""Model presets shipped with fmest: one JSON file per model in ``fmest/models/presets/``.

Each file holds the upstream ``config.json`` keys that matter, where they came from
(``source``, ``retrieved``), aliases, and the published parameter count as a cross-check.
Lookup is case-insensitive on the full name (``meta-llama/Llama-2-7b-hf``), the part after the
slash (``Llama-2-7b-hf``) and the aliases. This module imports neither torch nor transformers.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Iterable, Optional

from attrs import frozen

from fmest.errors import UnknownNameError
from fmest.models.hf import spec_from_hf_config
from fmest.models.spec import ModelSpec

PRESET_DIR = Path(__file__).resolve().parent / "presets"


@frozen(kw_only=True)
class PresetInfo:
    name: str
    aliases: tuple[str, ...]
    source: str
    retrieved: str
    model_type: str
    published_params: Optional[int] = None
    published_active_params: Optional[int] = None
    notes: str = ""
    path: str = ""


@functools.lru_cache(maxsize=None)
def _raw_presets() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for f in sorted(PRESET_DIR.glob("*.json")):
        with open(f, encoding="utf-8") as fh:
            data = json.load(fh)
        data["_path"] = str(f)
        out[data["name"]] = data
    return out


@functools.lru_cache(maxsize=None)
def _index() -> dict[str, str]:
    """lower-cased key -> canonical preset name."""
    idx: dict[str, str] = {}
    for name, data in _raw_presets().items():
        keys = [name, name.split("/")[-1], *data.get("aliases", [])]
        for k in keys:
            idx.setdefault(k.lower(), name)
    return idx


def list_presets() -> list[PresetInfo]:
    """Every shipped preset, sorted by name."""
    infos = []
    for name, d in sorted(_raw_presets().items(), key=lambda kv: kv[0].lower()):
        cfg = d.get("config", {})
        infos.append(PresetInfo(
            name=name, aliases=tuple(d.get("aliases", [])), source=d.get("source", ""),
            retrieved=d.get("retrieved", ""), model_type=str(cfg.get("model_type", "")),
            published_params=d.get("published_params"),
            published_active_params=d.get("published_active_params"),
            notes=d.get("notes", ""), path=d["_path"]))
    return infos


def preset_names(include_aliases: bool = False) -> list[str]:
    names = sorted(_raw_presets())
    if include_aliases:
        names = sorted(set(names) | {a for d in _raw_presets().values()
                                     for a in d.get("aliases", [])}
                       | {n.split("/")[-1] for n in names})
    return names


def find_preset(name: str) -> Optional[str]:
    """The canonical preset name for ``name`` (any spelling), or None."""
    key = name.strip().lower()
    hit = _index().get(key)
    if hit is None and "/" in key:
        hit = _index().get(key.split("/")[-1])
    return hit


def preset_data(name: str) -> dict:
    """The raw preset JSON (config plus provenance) for ``name``."""
    canon = find_preset(name)
    if canon is None:
        raise _unknown(name)
    return _raw_presets()[canon]


#: How alike (difflib ratio) a preset name must be to a mistyped one to be suggested: close
#: enough for a typo or a changed size (``llama-3-8bb``, ``mixtrl``), not a shared suffix.
NEAR_CUTOFF = 0.75


def near_models(name: str, keys: Iterable[str], n: int = 5) -> list[str]:
    """The preset names and aliases among ``keys`` close to ``name``, best first: typos (difflib
    ratio at least :data:`NEAR_CUTOFF`, on the whole name or on the parts after the slash), then
    a family typed alone (``mixtral``) or a preset inside a longer id (``org/llama-2-7b-hf-x``);
    empty when none is close (no list of unrelated models)."""
    import difflib

    query = name.strip().lower()
    tail = query.rsplit("/", 1)[-1]
    ranked: dict[str, tuple] = {}   # key -> (0, -ratio) for a typo, (1, length) for a part
    for key in keys:
        low = key.lower()
        key_tail = low.rsplit("/", 1)[-1]
        ratio = max(difflib.SequenceMatcher(None, query, low).ratio(),
                    difflib.SequenceMatcher(None, tail, key_tail).ratio())
        if ratio >= NEAR_CUTOFF:
            rank: tuple = (0, -ratio, len(key))
        elif len(tail) >= 4 and (tail in key_tail or (len(key_tail) >= 5 and key_tail in tail)):
            rank = (1, len(key))
        else:
            continue
        ranked[key] = min(rank, ranked.get(key, rank))
    out: list[str] = []
    for key in sorted(ranked, key=lambda k: (ranked[k], k)):
        if all(key.lower() != o.lower() for o in out):   # one spelling per name
            out.append(key)
    return out[:n]


def _unknown(name: str) -> UnknownNameError:
    near = near_models(name, preset_names(include_aliases=True))
    return UnknownNameError(
        field="model",
        message="no preset by that name (give a preset name, a local config.json or folder, "
                "or a Hub id when the Hub is reachable); " +
                ("did you mean one of the listed" if near else "fmest models lists the presets"),
        value=name, accepted=near)


#: ``upstream_config`` model types a preset is built from (remote code with an exact builder in
#: :mod:`fmest.models.hf`): Qwen v1 (``qwen``), ChatGLM2/3 (``chatglm``) and Baichuan/Baichuan2
#: (``baichuan``), whose fused q/k/v projections (``c_attn``, ``query_key_value``, ``W_pack``)
#: are one LoRA target each.
UPSTREAM_BUILT = ("qwen", "chatglm", "baichuan")
#: The key of a spec's ``hf_config`` that holds the preset's restatement in a transformers
#: model type (``config``): what the traced runner instantiates for a remote-code model.
RESTATED_KEY = "_restated_config"


@functools.lru_cache(maxsize=None)
def _load(canon: str) -> ModelSpec:
    d = _raw_presets()[canon]
    src = f"preset {Path(d['_path']).name} (from {d.get('source', '?')}, retrieved " \
          f"{d.get('retrieved', '?')})"
    upstream = d.get("upstream_config")
    if isinstance(upstream, dict) and upstream.get("model_type") in UPSTREAM_BUILT:
        # a remote-code model fmest builds module by module from its own config (its LoRA
        # target names are the upstream ones); the restatement in transformers' keys stays
        # beside it for tools that instantiate the model (``RESTATED_KEY``)
        return spec_from_hf_config(dict(upstream, **{RESTATED_KEY: d["config"]}), name=canon,
                                   source=src)
    return spec_from_hf_config(d["config"], name=canon, source=src)


def load_preset(name: str) -> ModelSpec:
    """The :class:`ModelSpec` of a shipped preset (case-insensitive name, short name or alias).

    Raises :class:`~fmest.errors.UnknownNameError` listing the nearest preset names.
    """
    canon = find_preset(name)
    if canon is None:
        raise _unknown(name)
    return _load(canon)
