"""Bundles: a directory of LightGBM model text files plus ``metadata.json``.

Loading validates everything before a prediction is made and names the offending file:
a missing or unparsable ``metadata.json``, a missing model file, a SHA-256 mismatch (a model
file changed after training), a model file LightGBM cannot parse, a feature this plugin cannot
compute or a format/library version it cannot read. Each is a
:class:`fmest.errors.PluginError`; the plugin lets it propagate from its hook, so the engine
reports it as this plugin's failure (a warning) and the policy falls back to theory.

Discovery: ``options.learned_model`` (``--learned-model``) is a path to a bundle directory or
the name of an entry point of the group ``fmest.learned_models``, whose object is a module (or
any object) with a ``BUNDLE_DIR`` attribute, a path, or a callable returning a path. Unset
means ``default``, the bundle this distribution ships.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, Optional

from fmest.errors import InputError, PluginError

from fmest_learned_lgbm.features import check_names

PLUGIN = "learned_lgbm"
FORMAT = "fmest-learned-lgbm/1"
ENTRYPOINT_GROUP = "fmest.learned_models"
QUANTILES = ("p10", "p50", "p90")
DEFAULT_NAME = "default"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _err(path: Path, message: str) -> PluginError:
    return PluginError(PLUGIN, f"learned bundle file {str(path)!r}: {message}")


class TargetModel:
    """The three quantile models of one target and what the bundle says about them."""

    def __init__(self, target: str, meta: dict, boosters: dict) -> None:
        self.target = target
        self.meta = meta
        self.boosters = boosters
        self.features: list[dict] = meta["features"]
        self.names = [f["name"] for f in self.features]
        self.margin = float(meta.get("interval_margin", 0.0))
        self.shrinkage = float(meta.get("shrinkage", 1.0))

    def encode(self, values: dict[str, Any]) -> list[float]:
        row = []
        for f in self.features:
            v = values[f["name"]]
            if f["kind"] == "categorical":
                levels = f["levels"]
                row.append(float(levels.index(v)) if v in levels else math.nan)
            else:
                row.append(float(v))
        return row

    def domain(self, values: dict[str, Any]) -> list[str]:
        """Why ``values`` lie outside the training domain (empty: in domain)."""
        out = []
        for f in self.features:
            v = values[f["name"]]
            if f["kind"] == "categorical":
                if v not in f["levels"]:
                    out.append(f"{f['name']}={v!r} not seen in training (seen: "
                               f"{', '.join(map(str, f['levels']))})")
            else:
                lo, hi = f["min"], f["max"]
                tol = 1e-9 * max(1.0, abs(lo), abs(hi))
                if v < lo - tol or v > hi + tol:
                    out.append(f"{f['name']}={v:g} outside training range [{lo:g}, {hi:g}]")
        return out

    def predict_log_ratio(self, values: dict[str, Any]) -> tuple[float, float, float]:
        """(low, point, high) of log(measured / theory): the median model's correction times
        the CV-chosen shrinkage, the P10/P90 models widened by the CV margin (and always
        containing the point)."""
        import numpy as np

        x = np.asarray([self.encode(values)], dtype=float)
        q = {k: float(self.boosters[k].predict(x, num_threads=1)[0]) for k in QUANTILES}
        point = self.shrinkage * q["p50"]
        lo = min(q["p10"] - self.margin, point)
        hi = max(q["p90"] + self.margin, point)
        return lo, point, hi


class Bundle:
    """A loaded, validated bundle."""

    def __init__(self, path: Path, meta: dict, targets: dict[str, TargetModel]) -> None:
        self.path = path
        self.meta = meta
        self.targets = targets
        self.name = meta.get("name") or path.name

    def describe(self) -> str:
        data = self.meta.get("training_data", {})
        return (f"bundle {self.name!r} ({self.path}), trained on "
                f"{data.get('description', '?')}")


def _version_tuple(text: str) -> tuple[int, ...]:
    out = []
    for part in str(text).split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def load_bundle(path: os.PathLike | str) -> Bundle:
    """Load and validate the bundle in directory ``path`` (see module doc for the checks)."""
    path = Path(path)
    meta_path = path / "metadata.json"
    if not path.is_dir():
        raise _err(path, "no such bundle directory")
    if not meta_path.is_file():
        raise _err(meta_path, "missing (a bundle directory holds metadata.json and its model "
                   "files)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _err(meta_path, f"unreadable or corrupt: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _err(meta_path, f"format {meta.get('format') if isinstance(meta, dict) else None!r}"
                   f" is not {FORMAT!r} (made by an incompatible version of fmest-learned-lgbm)")
    try:
        import lightgbm
    except ImportError as exc:
        raise PluginError(PLUGIN, f"lightgbm is not importable ({exc}); pip install "
                          "lightgbm") from None
    trained_with = meta.get("versions", {}).get("lightgbm", "0")
    if _version_tuple(lightgbm.__version__)[0] < _version_tuple(trained_with)[0]:
        raise _err(meta_path, f"trained with lightgbm {trained_with}, installed "
                   f"{lightgbm.__version__} cannot read it; upgrade lightgbm")
    targets: dict[str, TargetModel] = {}
    if not isinstance(meta.get("targets"), dict) or not meta["targets"]:
        raise _err(meta_path, "lists no targets")
    for target, tmeta in meta["targets"].items():
        try:
            names = [f["name"] for f in tmeta["features"]]
            files = {q: tmeta["models"][q] for q in QUANTILES}
        except (KeyError, TypeError) as exc:
            raise _err(meta_path, f"targets.{target} is incomplete ({exc})") from None
        unknown = check_names(names)
        if unknown:
            raise _err(meta_path, f"targets.{target} uses features this version of "
                       f"fmest-learned-lgbm cannot compute: {unknown}; retrain the bundle")
        boosters = {}
        for q, info in files.items():
            fpath = path / info["file"]
            if not fpath.is_file():
                raise _err(fpath, "missing")
            digest = sha256_file(fpath)
            if digest != info.get("sha256"):
                raise _err(fpath, f"SHA-256 {digest[:12]}... does not match metadata.json "
                           f"({str(info.get('sha256'))[:12]}...): the file changed after "
                           "training (tampered or corrupt)")
            try:
                booster = lightgbm.Booster(model_str=fpath.read_text(encoding="utf-8"))
            except Exception as exc:  # lightgbm raises its own LightGBMError
                raise _err(fpath, f"LightGBM cannot parse it: {exc}") from None
            if booster.num_feature() != len(names):
                raise _err(fpath, f"model has {booster.num_feature()} features, metadata.json "
                           f"lists {len(names)}")
            boosters[q] = booster
        targets[target] = TargetModel(target, tmeta, boosters)
    return Bundle(path, meta, targets)


_CACHE: dict[str, tuple[tuple, Bundle]] = {}


def _stamp(path: Path) -> tuple:
    try:
        return tuple(sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size)
                            for p in path.iterdir()))
    except OSError:
        return ()


def cached_bundle(path: os.PathLike | str) -> Bundle:
    """:func:`load_bundle`, memoised until a file in the directory changes."""
    path = Path(path).resolve()
    key = str(path)
    stamp = _stamp(path)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    bundle = load_bundle(path)
    _CACHE[key] = (stamp, bundle)
    return bundle


def _entry_points() -> list:
    return sorted(importlib_metadata.entry_points(group=ENTRYPOINT_GROUP), key=lambda e: e.name)


def _dir_of(obj: Any) -> Path:
    target = getattr(obj, "BUNDLE_DIR", obj)
    if callable(target) and not isinstance(target, (str, os.PathLike)):
        target = target()
    return Path(os.fspath(target))


def _builtin_default() -> Path:
    from fmest_learned_lgbm.bundles import BUNDLE_DIR

    return Path(BUNDLE_DIR)


def available_bundles() -> dict[str, tuple[Optional[Path], str]]:
    """name -> (directory or None, source or the error loading the entry point)."""
    out: dict[str, tuple[Optional[Path], str]] = {}
    for ep in _entry_points():
        if ep.name in out:
            continue
        try:
            out[ep.name] = (_dir_of(ep.load()), f"entry point {ep.value}")
        except Exception as exc:
            out[ep.name] = (None, f"entry point {ep.value} failed: {type(exc).__name__}: {exc}")
    if DEFAULT_NAME not in out:
        out[DEFAULT_NAME] = (_builtin_default(), "shipped with fmest-learned-lgbm")
    return out


def resolve_bundle_dir(name_or_path: Optional[str]) -> Path:
    """The directory of ``--learned-model NAME|PATH`` (``None``: the default bundle)."""
    if not name_or_path:
        name_or_path = DEFAULT_NAME
    found = available_bundles()
    if name_or_path in found:
        directory, source = found[name_or_path]
        if directory is None:
            raise PluginError(PLUGIN, f"learned model {name_or_path!r}: {source}")
        return directory
    p = Path(name_or_path).expanduser()
    if p.exists() or os.sep in name_or_path or name_or_path.startswith("."):
        return p
    raise InputError("options.learned_model", "not a bundle directory nor an installed "
                     "learned model", value=name_or_path, accepted=sorted(found))
