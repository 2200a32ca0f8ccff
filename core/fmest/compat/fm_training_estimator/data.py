"""The original's data formats (``fm_training_estimator/data/manager.py`` @ 1d04f05): the
versioned column lists of its lookup CSVs and regression models, and the helpers that
recognise a header and shape a query. Same names, arguments and results.

``v1`` keys rows by ``model_name``; ``v2`` and ``v3`` by six model features
(:data:`fmest.compat.fm_training_estimator.model.FEATURE_KEYS`), which :func:`format_query`
reads from the model's config as fmest resolves it (shipped presets, local ``config.json``
files; the Hub only when reachable) instead of ``AutoConfig``. ``v3`` adds ``method`` and
``gpu_model``; ``v1`` and ``v2`` have no GPU column, so their rows match any GPU.

Differences, on purpose: :func:`format_query` raises :class:`fmest.errors.InputError` for a
version it does not know (the original fails with an ``AttributeError`` on ``None``), and for a
``v2``/``v3`` model fmest cannot resolve (the original fills ``None`` and finds nothing).
"""

from __future__ import annotations

from typing import Any, Optional

from fmest.errors import InputError


class Format:
    """A class to track the various data formats used for lookup/regressor.

    Stores the features used (``X``) and predicted (``Y``) as comma-separated strings.
    """

    def __init__(self, name: str, X: str, Y: str) -> None:
        self.name = name
        self.X = X
        self.Y = Y

    def get_all_columns_string(self) -> str:
        return self.X + "," + self.Y

    def get_empty_key_dict(self) -> dict[str, Any]:
        return {x: None for x in self.X.split(",")}

    def __repr__(self) -> str:
        return f"Format({self.name!r}, {self.X!r}, {self.Y!r})"


#: The accepted data formats, exactly as the original lists them: a lookup CSV's header (and a
#: regression model's features) must be one of these, columns in this order.
formats = [
    Format(
        "v1",
        "model_name,number_gpus,batch_size,seq_len",
        "tokens_per_second,memory,memory_act",
    ),
    Format(
        "v2",
        "model_arch,model_hidden_size,model_intermediate_size,model_num_attn_heads,"
        "model_num_hidden_layers,model_num_key_value_heads,number_gpus,batch_size,seq_len",
        "tokens_per_second,memory,memory_act",
    ),
    Format(
        "v3",
        "model_arch,model_hidden_size,model_intermediate_size,model_num_attn_heads,"
        "model_num_hidden_layers,model_num_key_value_heads,method,gpu_model,number_gpus,"
        "batch_size,seq_len",
        "tokens_per_second,memory,memory_act",
    ),
]

#: Each version's full header, for error messages (``v1: model_name,number_gpus,...``).
ACCEPTED_HEADERS = tuple(f"{f.name}: {f.get_all_columns_string()}" for f in formats)


def lookup_format_version(data_keys: str) -> str:
    """The version whose header is exactly ``data_keys`` (comma-separated column names, X then
    Y, as a CSV header), else ``"undefined"``."""
    for f in formats:
        if data_keys == f.get_all_columns_string():
            return f.name
    return "undefined"


def get_format_by_version(version: str) -> Optional[Format]:
    """The :class:`Format` named ``version``, or ``None``."""
    for f in formats:
        if f.name == version:
            return f
    return None


def format_query(partials: dict, version: str, only_values: bool = False, *, engine=None):
    """A query for format ``version`` from ``partials`` (the original's keys: ``model_name``,
    ``number_gpus``, ``batch_size``, ``seq_len``, ``gpu_model``, ``method``).

    Keeps the keys of the version's X columns, in its order (missing ones are ``None``); for
    ``v2``/``v3`` the model features of ``partials["model_name"]`` are filled in. Returns the
    dict, or with ``only_values`` its ``values()`` (what a regression model is fed).
    ``engine`` (fmest's, optional) resolves the model name as that engine does.
    """
    vf = get_format_by_version(version)
    if vf is None:
        raise InputError("data format", "unknown format version (the lookup CSV's header is "
                         "none of the accepted ones)", value=version,
                         accepted=[f.name for f in formats])
    query = vf.get_empty_key_dict()
    for k, v in partials.items():
        if k in query:
            query[k] = v
    if version in ("v2", "v3"):
        from fmest.compat.fm_training_estimator.model import extract_model_features

        if partials.get("model_name") is None:
            raise InputError("model_name", f"format {version} keys rows by model features, "
                             "which need the model's name")
        features = extract_model_features(partials["model_name"], engine=engine)
        for k, v in features.items():
            if k in query:
                query[k] = v
    if not only_values:
        return query
    return query.values()


__all__ = ["Format", "formats", "lookup_format_version", "get_format_by_version",
           "format_query", "ACCEPTED_HEADERS"]
