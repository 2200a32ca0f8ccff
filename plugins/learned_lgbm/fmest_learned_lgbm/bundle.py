"""Bundles: a directory of LightGBM model text files plus ``metadata.json``.

Loading validates everything before a prediction is made and names the offending file:
a missing or unparsable ``metadata.json``, a missing model file, a SHA-256 mismatch (a model
file changed after training), a model file that is not whole (checked before LightGBM sees it:
LightGBM aborts the process on some truncated files, :func:`model_text_problem`), a model file
LightGBM cannot parse, a feature this plugin cannot
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
from fmest_learned_lgbm.features import check_names, domain_reasons

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


#: per-tree arrays and their length relative to num_leaves (LightGBM's Tree::ToString)
_TREE_ARRAYS = {"split_feature": -1, "split_gain": -1, "threshold": -1, "decision_type": -1,
                "left_child": -1, "right_child": -1, "internal_value": -1, "internal_weight": -1,
                "internal_count": -1, "leaf_value": 0, "leaf_weight": 0, "leaf_count": 0}


def _fields(block: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in block.splitlines() if "=" in line)


def _tree_problem(index: int, block: str, features: int) -> Optional[str]:
    """What is wrong with one ``Tree=`` block (None: nothing LightGBM would abort on)."""
    fields = _fields(block)
    try:
        leaves = int(fields["num_leaves"])
        cats = int(fields["num_cat"])
        # every array LightGBM writes is required (a dropped line aborts LightGBM)
        arrays = {k: fields[k].split() for k in _TREE_ARRAYS if leaves > 1 or k == "leaf_value"}
        values = [float(v) for key in arrays for v in arrays[key]]
        values += [float(v) for key in ("cat_threshold", "shrinkage") for v in
                   fields.get(key, "").split()]
        splits = [int(v) for v in arrays.get("split_feature", [])]
        children = [int(v) for k in ("left_child", "right_child") for v in arrays.get(k, [])]
        bounds = [int(v) for v in fields.get("cat_boundaries", "0").split()]
    except (KeyError, ValueError) as exc:
        return f"tree {index}: missing or malformed field ({exc})"
    if leaves < 1 or cats < 0:
        return f"tree {index}: num_leaves {leaves}, num_cat {cats}"
    for key, offset in _TREE_ARRAYS.items():
        if key in arrays and len(arrays[key]) != leaves + offset:
            return f"tree {index}: {key} has {len(arrays[key])} values, expected {leaves + offset}"
    if not all(math.isfinite(v) for v in values):
        return f"tree {index}: a leaf value or threshold is not finite"
    if any(not 0 <= s < features for s in splits):
        return f"tree {index}: split_feature outside 0..{features - 1}"
    if any(not -leaves <= c <= leaves - 2 for c in children):
        return f"tree {index}: a child index points outside the tree"
    if cats and (len(bounds) != cats + 1 or "cat_threshold" not in fields
                 or bounds[-1] != len(fields["cat_threshold"].split())):
        return f"tree {index}: cat_boundaries/cat_threshold do not match num_cat {cats}"
    return None


def model_text_problem(data: bytes) -> Optional[str]:
    """Why LightGBM's text model ``data`` is incomplete or inconsistent (None: it is whole).

    LightGBM aborts the process (``[LightGBM] [Fatal]`` + ``terminate``) on some malformed
    model strings instead of raising, so a truncated file whose checksum was recomputed would
    kill fmest; this checks the structure LightGBM's ``GBDT::LoadModelFromString`` relies on
    first: the ``tree`` header, ``tree_sizes`` (the byte length of each ``Tree=i`` block, which
    LightGBM seeks by), each tree's arrays against ``num_leaves``, and ``end of trees``."""
    if not data.startswith(b"tree\n"):
        return "does not start with LightGBM's 'tree' header"
    head, sep, _ = data.partition(b"\nTree=0\n")
    if not sep:
        return "holds no trees (no 'Tree=0' block)"
    try:
        header = _fields(head.decode("ascii"))
        sizes = [int(s) for s in header["tree_sizes"].split()]
        features = int(header["max_feature_idx"]) + 1
    except (KeyError, ValueError, UnicodeDecodeError) as exc:
        return f"header incomplete or malformed ({exc})"
    pos = len(head) + 1
    for index, size in enumerate(sizes):
        block = data[pos:pos + size]
        if len(block) != size or not block.startswith(f"Tree={index}\n".encode()):
            return f"truncated or altered: tree {index} of {len(sizes)} is not where tree_sizes says"
        try:
            problem = _tree_problem(index, block.decode("ascii"), features)
        except UnicodeDecodeError:
            problem = f"tree {index}: not ASCII"
        if problem:
            return problem
        pos += size
    tail = data[pos:].lstrip(b"\n")
    if not tail.startswith(b"end of trees"):
        return "truncated: no 'end of trees' after the last tree"
    # a cut in the parameters section crashes LightGBM (segmentation fault): it must be whole
    _, found, params = tail.partition(b"\nparameters:\n")
    params, end, rest = params.partition(b"\nend of parameters\n")
    if not (found and end and rest.lstrip(b"\n").startswith(b"pandas_categorical:")):
        return "truncated: the parameters section or pandas_categorical line is incomplete"
    if not all(line.startswith(b"[") and line.endswith(b"]") and b": " in line
               for line in params.split(b"\n") if line):
        return "the parameters section is malformed"
    return None


def gated_point(shrink: float, gate: bool, p10: float, p50: float, p90: float) -> float:
    """The answer's log correction: ``shrink x P50``; with ``gate``, 0 (theory itself) unless
    the model's own P10-P90 excludes theory (it is 80 % sure the formulas err one way). The
    gate and the shrinkage are chosen by held-out (grouped) CV at training time."""
    if gate and p10 <= 0.0 <= p90:
        return 0.0
    return shrink * p50


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
        self.gate = bool(meta.get("gate", False))

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
        """Why ``values`` lie outside the training domain (empty: in domain); only features
        some tree splits on count (:func:`fmest_learned_lgbm.features.domain_reasons`)."""
        return domain_reasons(self.features, values)

    def predict_log_ratio(self, values: dict[str, Any]) -> tuple[float, float, float]:
        """(low, point, high) of log(measured / theory): the median model's correction times
        the CV-chosen shrinkage (0 when the gate is on and P10-P90 contains theory:
        :func:`gated_point`), the P10/P90 models widened by the CV margin (and always
        containing the point)."""
        import numpy as np

        x = np.asarray([self.encode(values)], dtype=float)
        q = {k: float(self.boosters[k].predict(x, num_threads=1)[0]) for k in QUANTILES}
        point = gated_point(self.shrinkage, self.gate, q["p10"], q["p50"], q["p90"])
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
            data = fpath.read_bytes()
            problem = model_text_problem(data)
            if problem:  # LightGBM would abort or crash the process on it
                raise _err(fpath, f"not a whole LightGBM model: {problem}")
            try:
                booster = lightgbm.Booster(model_str=data.decode("utf-8"))
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
