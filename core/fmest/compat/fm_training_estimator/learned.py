"""The learned path of the drop-in: what the user's measurements (``base_data_path``) and model
(``model_path``) answer for memory and tokens/s, before theory.

The original's hybrid estimators (``memory/hybrid/hybrid.py``, ``memory/lora/hybrid.py``,
``throughput/hybrid/hybrid.py`` @ 1d04f05) answer in this order, and so does
:func:`learned_answer`:

1. **Exact lookup** in the CSV at ``data_path`` (:class:`.lookup.LookupRegressor`): the query
   reduced to the columns of the CSV's format version (:func:`.data.format_query`; ``v1`` has
   no GPU column, so its rows match any GPU, as in the original); the first matching row's
   ``memory`` and ``tokens_per_second`` answer.
2. **A model**, for what the lookup did not answer:

   * ``model_path`` an fmest learned bundle (a directory with ``metadata.json``, written by
     ``fmest learn``): the ``learned_lgbm`` plugin's correction of fmest's analytic answer for
     ``job``, asked through the engine with the ``learned`` policy, so fmest's rule holds: a
     learned answer counts only inside the bundle's training domain (docs/learned.md);
     outside it, a warning names the features outside and theory answers. Step time becomes
     whole-job tokens/s through the engine's tokens answer, as for every estimate.
   * else, a ``data_path`` of at least :data:`MIN_TRAINING_ROWS` rows: a bundle trained on that
     CSV by fmest's own training code (the ``learn`` command the ``learned_lgbm`` plugin
     registers: the CSV is read by its fm-training-estimator reader, v1/v2/v3), cached under
     ``$FMEST_CACHE_DIR/fmte-learned/<sha256 of the CSV>`` (default ``~/.cache/fmest``, the
     convention of the trace cache), so the same data trains once. The cache is written whole
     or not at all (``fmest learn`` swaps a finished directory in:
     :func:`fmest.atomic.replace_dir_atomic`); a cached bundle that no longer loads (another
     lightgbm, another plugin version) is trained again. Where the cache cannot be written,
     the bundle is trained in a temporary directory and dropped after the answer.
   * the original's own models (a zip of ``xgboost``, ``linear``, ``mingpu`` or ``arise``
     regressors) cannot be read by fmest: a warning says so and the CSV, if any, is used as
     above.

3. **Nothing**: both answers ``None``; the caller answers from theory.

Whatever cannot be honoured (a missing or unreadable file, a header that is no format, a v2/v3
model whose features fmest cannot resolve, lightgbm or the plugin missing, too few rows) is a
warning, never an exception: the SDK must keep answering from theory. With neither path it
returns at once and imports nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

import attrs

from fmest.errors import FmestError

#: The fewest CSV rows a model is trained from. ``fmest learn`` trains a target only from 8
#: usable rows (``fmest_learned_lgbm.train.MIN_ROWS``: fewer leave its cross-validation
#: nothing to hold out), so a smaller CSV cannot train one and is not tried (a warning says
#: so). The original's own test tables (7 and 2 rows) stay lookup-only.
MIN_TRAINING_ROWS = 8
#: The cache's folder under ``$FMEST_CACHE_DIR``.
CACHE_SUBDIR = "fmte-learned"
#: The original's regression model kinds (regressor/dispatch.py ``GetRegressor``).
FMTE_MODEL_TYPES = ("xgboost", "linear", "mingpu", "arise")


@attrs.frozen
class LearnedAnswer:
    """What the user's data and model answer: per-GPU total memory (bytes) and whole-job
    tokens/s, each ``None`` when they do not answer it, with where each came from
    (``memory_basis``/``tps_basis``: ``"lookup: data.csv row 3"``, ``"model trained on
    data.csv (12 rows)"``, ``""``) and what could not be honoured (``warnings``)."""

    memory_bytes: Optional[float]
    tokens_per_second: Optional[float]
    memory_basis: str
    tps_basis: str
    warnings: tuple[str, ...]


EMPTY = LearnedAnswer(None, None, "", "", ())


@attrs.define
class _Answers:
    memory: Optional[float] = None
    tps: Optional[float] = None
    memory_basis: str = ""
    tps_basis: str = ""
    warnings: list[str] = attrs.field(factory=list)

    def done(self) -> bool:
        return self.memory is not None and self.tps is not None

    def frozen(self) -> LearnedAnswer:
        return LearnedAnswer(self.memory, self.tps, self.memory_basis, self.tps_basis,
                             tuple(dict.fromkeys(self.warnings)))


def cache_dir() -> Path:
    """``$FMEST_CACHE_DIR/fmte-learned``, default ``~/.cache/fmest/fmte-learned``."""
    base = os.environ.get("FMEST_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                               "fmest")
    return Path(base) / CACHE_SUBDIR


def _positive(value: Any) -> Optional[float]:
    """A finite positive number, else ``None`` (an empty or NaN cell answers nothing)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if f > 0 and f != float("inf") else None


def learned_answer(query: dict, job, *, data_path: Optional[str], model_path: Optional[str],
                   engine) -> LearnedAnswer:
    """Memory and tokens/s from ``data_path`` and ``model_path`` for ``query`` (the original's
    query dict: ``model_name``, ``number_gpus``, ``batch_size``, ``seq_len``, ``gpu_model``,
    ``method``) and ``job`` (the fmest job of the same configuration), in the original's order
    (module doc). Never raises for a missing or unusable path: it warns."""
    if not data_path and not model_path:
        return EMPTY
    out = _Answers()
    rows: Optional[int] = None
    if data_path:
        rows = _lookup(query, str(data_path), engine, out)
    if out.done():
        return out.frozen()
    with contextlib.ExitStack() as stack:
        bundle = _bundle(str(model_path) if model_path else None,
                         str(data_path) if data_path else None, rows, engine, out, stack)
        if bundle is not None:
            directory, basis, cached_from = bundle
            if not _predict(directory, basis, job, engine, out,
                            retrainable=cached_from is not None):
                # a cached bundle that no longer loads (another lightgbm or plugin version)
                again = _train(cached_from or "", engine, out, stack, force=True)
                if again is not None:
                    _predict(again[0], again[1], job, engine, out)
    return out.frozen()


# -- 1. lookup ------------------------------------------------------------------------------
def _lookup(query: dict, data_path: str, engine, out: _Answers) -> Optional[int]:
    """Answer from the first exact row; returns the CSV's row count (``None``: unreadable)."""
    from fmest.compat.fm_training_estimator.data import ACCEPTED_HEADERS, format_query
    from fmest.compat.fm_training_estimator.lookup import LookupRegressor

    try:
        reg = LookupRegressor(data_path)
    except FmestError as exc:
        out.warnings.append(f"estimator_metadata.base_data_path: {exc}; no lookup")
        return None
    assert reg.data is not None
    rows = len(reg.data)
    version = reg.get_data_format()
    if version == "undefined":
        out.warnings.append(
            f"estimator_metadata.base_data_path {data_path}: its header "
            f"{','.join(reg.data.columns)!r} is none of fm-training-estimator's data formats "
            f"({'; '.join(ACCEPTED_HEADERS)}); no lookup")
        return rows
    try:
        keys = format_query(query, version, engine=engine)
        res = reg.run(keys)
    except FmestError as exc:
        out.warnings.append(f"estimator_metadata.base_data_path {data_path} is format "
                            f"{version}: its query cannot be built ({exc}); no lookup")
        return rows
    if res.empty:
        return rows
    first, line = res.rows[0], res.row_numbers[0]
    basis = f"lookup: {data_path} row {line}"
    memory, tps = _positive(first.get("memory")), _positive(first.get("tokens_per_second"))
    if memory is not None:
        out.memory, out.memory_basis = memory, basis
    if tps is not None:
        out.tps, out.tps_basis = tps, basis
    return rows


# -- 2. which model --------------------------------------------------------------------------
def _fmte_model_type(path: Path) -> Optional[str]:
    """The ``model_type`` entry of one of the original's model zips, else ``None``."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            return z.read("model_type").decode("utf-8", "replace").strip() or "unknown"
    except (OSError, KeyError, zipfile.BadZipFile, ValueError):
        return None


def _bundle(model_path: Optional[str], data_path: Optional[str], rows: Optional[int], engine,
            out: _Answers, stack: contextlib.ExitStack
            ) -> Optional[tuple[Path, str, Optional[str]]]:
    """(bundle directory, basis, the CSV when the bundle came from the cache) to predict
    with, or ``None`` (each reason a warning)."""
    instead = (f"; trying a model trained on base_data_path {data_path} instead"
               if data_path and rows is not None and rows >= MIN_TRAINING_ROWS else "")
    if model_path:
        p = Path(model_path).expanduser()
        if p.is_dir() and (p / "metadata.json").is_file():
            return p, f"fmest learned bundle {model_path}", None
        if p.is_dir():
            out.warnings.append(f"model_path {model_path}: a directory without metadata.json, "
                                f"so not an fmest learned bundle (fmest learn DATA --out DIR "
                                f"writes one){instead}")
        elif p.is_file():
            kind = _fmte_model_type(p)
            if kind is not None:
                out.warnings.append(
                    f"fmest cannot read fm-training-estimator's {kind} model {model_path}; "
                    "train an fmest bundle from the same data (fmest learn DATA.csv --out DIR)"
                    f" and give DIR as model_path{instead}")
            else:
                out.warnings.append(f"model_path {model_path}: neither an fmest learned bundle "
                                    "(a directory with metadata.json) nor an "
                                    f"fm-training-estimator model zip{instead}")
        else:
            out.warnings.append(f"model_path {model_path}: no such file or directory{instead}")
    if not data_path or rows is None:
        return None
    if rows < MIN_TRAINING_ROWS:
        out.warnings.append(
            f"estimator_metadata.base_data_path {data_path} has {rows} rows; a model is "
            f"trained from {MIN_TRAINING_ROWS} or more (fmest learn's minimum per target), so "
            "what the lookup did not answer comes from theory")
        return None
    got = _train(data_path, engine, out, stack)
    return None if got is None else (got[0], got[1], data_path if got[2] else None)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _learn_command(engine, out: _Answers):
    """The ``learn`` command's ``(add_arguments, run)``, or ``None`` with a warning."""
    try:
        command = engine.commands().get("learn")
    except Exception as exc:  # a plugin's command registration: its failure, not the user's
        command, why = None, f" ({type(exc).__name__}: {exc})"
    else:
        why = ""
    if command is None:
        out.warnings.append("no installed plugin trains models from data (the learned_lgbm "
                            f"plugin's 'fmest learn'){why}: pip install fmest-learned-lgbm; "
                            "theory answers what the lookup did not")
        return None
    return command[1], command[2]


def _run_learn(command, data_path: str, directory: Path, engine) -> None:
    """``fmest learn DATA --out DIRECTORY`` through the plugin's own command (its table goes
    nowhere)."""
    import argparse
    import io

    add_arguments, run = command
    parser = argparse.ArgumentParser(prog="fmest learn")
    add_arguments(parser)
    args = parser.parse_args([data_path, "--out", str(directory), "--format", "json",
                              "--no-loso"])
    with contextlib.redirect_stdout(io.StringIO()):
        run(args, engine)


def _train(data_path: str, engine, out: _Answers, stack: contextlib.ExitStack, *,
           force: bool = False) -> Optional[tuple[Path, str, bool]]:
    """(bundle trained on ``data_path``, its basis text, whether it came from the cache)
    (cached by the CSV's SHA-256; ``force``: train even when cached)."""
    try:
        digest = _sha256(data_path)
    except OSError as exc:
        out.warnings.append(f"estimator_metadata.base_data_path {data_path}: cannot read it "
                            f"({exc.strerror or exc}); no model")
        return None
    directory = cache_dir() / digest
    basis = f"model trained on {data_path}"
    if not force and (directory / "metadata.json").is_file():
        return directory, basis, True
    command = _learn_command(engine, out)
    if command is None:
        return None
    failed = "cannot train a model on estimator_metadata.base_data_path " + data_path
    try:
        try:
            _run_learn(command, data_path, directory, engine)
        except FmestError as exc:
            if getattr(exc, "field", None) != "--out":
                raise
            # the cache cannot be written: train for this answer only
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="fmest-fmte-learned-"))) / "bundle"
            out.warnings.append(f"the model cache {cache_dir()} cannot be written ({exc}); "
                                "the model trained on base_data_path is not kept")
            _run_learn(command, data_path, directory, engine)
    except FmestError as exc:
        out.warnings.append(f"{failed}: {exc}; theory answers what the lookup did not")
        return None
    except Exception as exc:  # training is a bonus: a failure in it must not stop the answer
        out.warnings.append(f"{failed}: {type(exc).__name__}: {exc}; theory answers what the "
                            "lookup did not")
        return None
    return directory, basis, False


# -- predicting -----------------------------------------------------------------------------
def _trained_rows(directory: Path, target: str) -> Optional[int]:
    import json

    try:
        meta = json.loads((directory / "metadata.json").read_text(encoding="utf-8"))
        return int(meta["targets"][target]["rows"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _learned(decision) -> list:
    return [c for c in decision.candidates if c.provenance.basis == "learned"]


def _why_not(shown: str, decision, basis: str, learners: list[str]) -> Optional[str]:
    """Why the bundle did not answer (``shown``: the quantity's name in the warning), or
    ``None`` when it did."""
    chosen = decision.chosen
    if chosen is not None and chosen.provenance.basis == "learned":
        return None
    cands = _learned(decision)
    if cands and cands[0].provenance.in_domain is False:
        outside = [n for n in cands[0].notes if n.startswith("outside the training domain")]
        return (f"{basis}: this job is {outside[0] if outside else 'outside its training domain'}"
                f"; fmest answers {shown} from a learned model only inside its training "
                "domain (docs/learned.md), so theory answers it")
    failed = [f for f in decision.failures if f.plugin in learners]
    if failed:
        return f"{basis}: {failed[0].error}; theory answers {shown}"
    return f"{basis}: the model has no {shown} answer for this job; theory answers it"


def _predict(directory: Path, basis: str, job, engine, out: _Answers, *,
             retrainable: bool = False) -> bool:
    """Fill what ``out`` lacks from the bundle in ``directory``. With ``retrainable`` (a
    cached bundle), a bundle the plugin cannot load returns ``False`` without a warning, so the
    caller can train it again; otherwise ``True``."""
    learners = [name for name, info in engine.registries.estimators.items()
                if "learned" in info.bases]
    if not learners:
        out.warnings.append(f"{basis}: no installed plugin answers from learned bundles (the "
                            "learned_lgbm plugin): pip install fmest-learned-lgbm; theory "
                            "answers what the lookup did not")
        return True
    asked = job.evolve(options={"method": "learned", "learned_model": str(directory)})
    try:
        report = engine.estimate(asked, quantities=("memory", "time", "tokens"))
    except FmestError as exc:
        out.warnings.append(f"{basis}: cannot estimate this job with it ({exc}); theory "
                            "answers what the lookup did not")
        return True
    decisions = report.decisions
    failed = any(f.plugin in learners for d in decisions.values() for f in d.failures)
    if retrainable and failed and not any(_learned(d) for d in decisions.values()):
        return False
    for quantity, shown in (("memory", "memory"), ("time", "tokens/s")):
        if quantity not in decisions or (out.memory if quantity == "memory" else out.tps) \
                is not None:
            continue
        why = _why_not(shown, decisions[quantity], basis, learners)
        answer = report.memory if quantity == "memory" else report.tokens
        if why is not None or answer is None:
            out.warnings.append(why or f"{basis}: no {shown} answer for this job")
            continue
        rows = _trained_rows(directory, quantity)
        told = basis + (f" ({rows} rows)" if rows is not None else "")
        if quantity == "memory":
            out.memory, out.memory_basis = float(report.memory.total_bytes), told
        else:
            out.tps, out.tps_basis = float(report.tokens.tokens_per_second), told
    return True


__all__ = ["LearnedAnswer", "learned_answer", "MIN_TRAINING_ROWS", "cache_dir"]
