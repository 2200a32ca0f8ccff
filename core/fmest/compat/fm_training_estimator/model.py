"""The original's model helpers (``fm_training_estimator/utils/model.py`` @ 1d04f05):
:func:`extract_model_features` and :func:`get_model_max_length`, with the same names,
arguments and results, read from the model's ``config.json`` as fmest resolves it.

The original calls ``transformers.AutoConfig.from_pretrained`` (the Hugging Face Hub or a local
folder). Here the name goes through fmest's own model resolution, the one the engine uses for
``job.model`` (:func:`fmest.models.local.resolve_model`: shipped presets, a local
``config.json`` or folder, the alias table, then the Hub only when it is reachable), and the
features are read from the raw config dict it keeps (``ModelSpec.hf_config``), with the
original's key fallbacks (``n_embd``/``n_embed``, ``n_inner``, ``n_head``, ``n_layer``, kv heads
= attention heads). Differences, on purpose:

* a model fmest cannot resolve raises :class:`fmest.errors.InputError` naming the model and the
  nearest preset names (the original logs the exception and returns ``{}``, which later
  lookups silently turn into "no match");
* the config is the file as written, not ``AutoConfig``'s object with transformers' class
  defaults filled in: a key the file omits takes the original's fallback (``-1``, or 4096 for
  the maximum length), not the class default. Published configs write these keys.

:func:`features_from_config` and :func:`preset_with_features` serve the learned path: the
latter maps a feature row of the original's ``v2``/``v3`` data back to a shipped preset.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Optional

from fmest.errors import InputError

#: The feature keys, in the original's order (``v2``/``v3`` data columns begin with them).
FEATURE_KEYS = ("model_arch", "model_hidden_size", "model_intermediate_size",
                "model_num_attn_heads", "model_num_hidden_layers", "model_num_key_value_heads")
#: The original's output formats.
FORMATS = ("dict", "list", "csv")
#: The original's answer when a config has neither ``n_positions`` nor
#: ``max_position_embeddings`` (utils/model.py ``get_model_max_length``).
DEFAULT_MAX_LENGTH = 4096

_log = logging.getLogger("fm_training_estimator")


def model_config(model: str, *, engine=None) -> dict:
    """The raw ``config.json`` dict of ``model`` as fmest resolves it.

    With ``engine`` the engine's own resolution answers (``Engine.resolve_model``: plugins'
    resolvers and presets included), else the shipped presets, local files, the alias table
    and (when reachable) the Hub. Raises :class:`InputError` (field ``model``) naming the model.
    """
    if not isinstance(model, str) or not model.strip():
        raise InputError("model", "give a model name (a preset, a Hub id) or a local "
                         "config.json or folder", value=model)
    if engine is not None:
        from fmest.job import Job

        spec = engine.resolve_model(Job(model=model.strip()))
    else:
        from fmest.models.local import resolve_model

        spec = resolve_model(model)
    return dict(spec.hf_config)


def _first(conf: dict, *keys: str, default: Any = -1) -> Any:
    """The value of the first of ``keys`` present in ``conf`` (present, even when ``None``:
    the original tests ``key in conf``), else ``default``."""
    for k in keys:
        if k in conf:
            return conf[k]
    return default


def features_from_config(conf: dict, *, model: str = "model") -> dict[str, Any]:
    """The original's feature dict of a config dict (``model`` names it in errors)."""
    arch = conf.get("architectures")
    if not isinstance(arch, (list, tuple)) or not arch:
        raise InputError("model", "its config.json has no 'architectures' list, which the "
                         "model_arch feature is read from", value=model)
    res: dict[str, Any] = {"model_arch": arch[0]}
    res["model_hidden_size"] = _first(conf, "hidden_size", "n_embd", "n_embed")
    res["model_intermediate_size"] = _first(conf, "intermediate_size", "n_inner")
    res["model_num_attn_heads"] = _first(conf, "num_attention_heads", "n_head")
    res["model_num_hidden_layers"] = _first(conf, "num_hidden_layers", "n_layer")
    res["model_num_key_value_heads"] = _first(conf, "num_key_value_heads",
                                              default=res["model_num_attn_heads"])
    return res


def _formatted(res: dict[str, Any], fmt: str) -> Any:
    if fmt == "dict":
        return res
    if fmt == "list":
        return list(res.values())
    if fmt == "csv":
        return ",".join(f"{v}" for v in res.values())
    _log.warning("Unknown format selected: %s", fmt)  # the original returns the dict
    return res


def extract_model_features(model: str, fmt: str = "dict", *, engine=None) -> Any:
    """The model's features: ``model_arch``, ``model_hidden_size``, ``model_intermediate_size``,
    ``model_num_attn_heads``, ``model_num_hidden_layers``, ``model_num_key_value_heads``.

    ``fmt``: ``"dict"`` (default), ``"list"`` (the values in that order) or ``"csv"`` (the
    values joined by commas); another value logs a warning and returns the dict, as the
    original does. ``engine`` (fmest's, optional): resolve the name as that engine does.
    Raises :class:`InputError` naming the model when fmest cannot resolve it.
    """
    return _formatted(features_from_config(model_config(model, engine=engine), model=model), fmt)


def get_model_max_length(model_path: str, *, engine=None) -> int:
    """The model's maximum sequence length: ``n_positions``, else ``max_position_embeddings``,
    else 4096 (the original's fallback)."""
    conf = model_config(model_path, engine=engine)
    for key in ("n_positions", "max_position_embeddings"):
        if conf.get(key) is not None:
            return int(conf[key])
    return DEFAULT_MAX_LENGTH


def _same(a: Any, b: Any) -> bool:
    """One feature value against another: numbers numerically (a CSV cell ``"4096"`` equals
    ``4096``), anything else as text."""
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a).strip() == str(b).strip()


@functools.lru_cache(maxsize=1)
def _preset_features() -> tuple[tuple[str, dict[str, Any], Optional[int]], ...]:
    """(preset name, features, vocabulary size) of every shipped preset, sorted by name."""
    from fmest.models import presets

    out = []
    for info in presets.list_presets():
        conf = presets.preset_data(info.name).get("config", {})
        try:
            feats = features_from_config(conf, model=info.name)
        except InputError:
            continue
        vocab = conf.get("vocab_size")
        out.append((info.name, feats, vocab if isinstance(vocab, int) else None))
    return tuple(sorted(out, key=lambda item: item[0].lower()))


def preset_with_features(features: dict[str, Any],
                         vocab_size: Optional[int] = None) -> Optional[str]:
    """The shipped preset whose features equal ``features`` (the six :data:`FEATURE_KEYS`;
    numbers compared numerically), or ``None``.

    The features leave out the vocabulary, and several presets can share all six (Llama-2-7B,
    CodeLlama-7B, granite-7b-base, open_llama_7b and Baichuan2-7B: 32000, 32016, 32000, 32000
    and 125696 tokens). With ``vocab_size`` only presets of that vocabulary count; without it,
    the vocabulary most of the matching presets share (ties: the smaller), so one outlier (a
    quarter of Baichuan2-7B's parameters are its embedding and head) cannot stand for the
    family. Among those, the first by name answers, so a row always maps to the same preset.
    """
    try:
        wanted = [features[k] for k in FEATURE_KEYS]
    except KeyError:
        return None
    hits = [(name, vocab) for name, feats, vocab in _preset_features()
            if all(_same(feats[k], w) for k, w in zip(FEATURE_KEYS, wanted, strict=True))]
    if vocab_size is not None:
        hits = [(name, vocab) for name, vocab in hits if vocab == vocab_size]
    if not hits:
        return None
    counts: dict[Optional[int], int] = {}
    for _name, vocab in hits:
        counts[vocab] = counts.get(vocab, 0) + 1
    common = min(counts, key=lambda v: (-counts[v], v if v is not None else 1 << 62))
    return next(name for name, vocab in hits if vocab == common)


def architecture_model_type(arch: str) -> Optional[str]:
    """The ``model_type`` of the shipped presets with architecture ``arch`` (the first by
    name), or ``None`` when no preset has it."""
    from fmest.models import presets

    for name, feats, _vocab in _preset_features():
        if feats["model_arch"] == arch:
            mt = presets.preset_data(name).get("config", {}).get("model_type")
            return str(mt) if mt else None
    return None


__all__ = ["extract_model_features", "get_model_max_length", "features_from_config",
           "preset_with_features", "architecture_model_type", "model_config", "FEATURE_KEYS"]
