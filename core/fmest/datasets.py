"""Count the tokens of a dataset file (``--dataset FILE``): JSONL, JSON, CSV/TSV, Parquet, text.

Read once, at the input door (:func:`fmest.inputs.build_job` calls :func:`resolve_dataset`), so
no estimate hook reads a file: the count becomes ``workload.dataset_tokens`` and its origin is
reported with the job's other input origins.

With the model's tokenizer when one is available locally (a model folder holding
``tokenizer.json``; loaded with the ``tokenizers`` library, no network), otherwise by the
documented approximation of ``CHARS_PER_TOKEN`` characters per token. A tiny progress bar goes
to stderr when stderr is a terminal or the file is larger than ``PROGRESS_MIN_BYTES``. Every
problem is an :class:`fmest.errors.InputError` on ``workload.dataset_path``.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional, TextIO

from attrs import frozen

from fmest.errors import InputError

if TYPE_CHECKING:
    from fmest.job import Job, Workload

FIELD = "workload.dataset_path"

#: "A helpful rule of thumb is that one token generally corresponds to ~4 characters of text
#: for common English text" (OpenAI tokenizer page, https://platform.openai.com/tokenizer;
#: the Hugging Face course, "Tokenizers" chapter, gives the same order for BPE vocabularies).
CHARS_PER_TOKEN = 4.0
#: Files larger than this get a progress bar even when stderr is not a terminal.
PROGRESS_MIN_BYTES = 64 * 1024 * 1024
#: Text fields counted in JSONL/CSV/Parquet records, in this order; when none is present every
#: string value of the record is counted.
TEXT_FIELDS = ("text", "content", "prompt", "completion", "instruction", "input", "output",
               "response", "question", "answer", "messages", "conversations")
#: Where the error text sends a user who reads Parquet without pyarrow (the core's extra).
PARQUET_EXTRA = "pip install 'fmest[parquet]'"


@frozen(kw_only=True)
class TokenCount:
    tokens: int
    records: int
    characters: int
    method: str


class ProgressBar:
    """Bytes read of a dataset file, on stderr through :class:`fmest.output.render.Progress` (a bar on
    a terminal; in a log, a line with the percentage every few seconds)."""

    def __init__(self, total_bytes: int, *, enabled: bool, stream: Optional[TextIO] = None):
        from fmest.output.render import Progress

        self.total = max(1, total_bytes)
        self.enabled = enabled
        self._bar = Progress("counting tokens", self.total, enabled=enabled, stream=stream,
                             min_interval_s=2.0)

    def update(self, done_bytes: int, force: bool = False) -> None:
        frac = min(1.0, done_bytes / self.total)
        self._bar.update(min(done_bytes, self.total), detail=f"{frac * 100:5.1f}%",
                         force=force)

    def close(self) -> None:
        if self.enabled:
            self.update(self.total, force=True)
        self._bar.close()


def _show_progress(size: int) -> bool:
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    return tty or size > PROGRESS_MIN_BYTES


def _record_text(rec: Any) -> str:
    if isinstance(rec, str):
        return rec
    if isinstance(rec, dict):
        picked = [rec[k] for k in TEXT_FIELDS if k in rec]
        values = picked if picked else list(rec.values())
        return "\n".join(_record_text(v) for v in values if v is not None)
    if isinstance(rec, (list, tuple)):
        return "\n".join(_record_text(v) for v in rec)
    return ""


class _Counted(io.RawIOBase):
    """Wraps a binary file and reports how far it has been read (for the progress bar)."""

    def __init__(self, fh: io.FileIO, bar: ProgressBar):
        self.fh, self.bar, self.done = fh, bar, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> Optional[int]:
        n = self.fh.readinto(b)
        self.done += n or 0
        self.bar.update(self.done)
        return n

    def close(self) -> None:
        self.fh.close()
        super().close()


def _open_text(path: Path, bar: ProgressBar) -> io.TextIOWrapper:
    raw = _Counted(io.FileIO(path, "rb"), bar)
    return io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8", errors="replace")


def _jsonl_texts(path: Path, bar: ProgressBar) -> Iterator[str]:
    with _open_text(path, bar) as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(FIELD, f"{path.name}: line {lineno} is not valid JSON ({exc.msg})",
                                 value=str(path)) from None
            yield _record_text(rec)


def _json_texts(path: Path, bar: ProgressBar) -> Iterator[str]:
    with _open_text(path, bar) as fh:
        try:
            data = json.load(fh)
        except json.JSONDecodeError as exc:
            raise InputError(FIELD, f"{path.name}: not valid JSON (line {exc.lineno}: {exc.msg})",
                             value=str(path)) from None
    if isinstance(data, dict):
        data = next((v for v in data.values() if isinstance(v, list)), [data])
    if not isinstance(data, list):
        raise InputError(FIELD, f"{path.name}: expected a list of records", value=str(path))
    for rec in data:
        yield _record_text(rec)


def _csv_texts(path: Path, bar: ProgressBar, delimiter: str) -> Iterator[str]:
    with _open_text(path, bar) as fh:
        reader = csv.DictReader(fh, delimiter=delimiter)
        if not reader.fieldnames:
            raise InputError(FIELD, f"{path.name}: no header row", value=str(path))
        try:
            for rec in reader:
                yield _record_text({k: v for k, v in rec.items() if k is not None})
        except csv.Error as exc:
            raise InputError(FIELD, f"{path.name}: malformed CSV ({exc})",
                             value=str(path)) from None


def _parquet_texts(path: Path, bar: ProgressBar) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(FIELD, f"reading Parquet needs pyarrow ({PARQUET_EXTRA}), or convert "
                         "the file to JSONL", value=str(path)) from None
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid
        raise InputError(FIELD, f"{path.name}: not a readable Parquet file ({exc})",
                         value=str(path)) from None
    cols = [c for c in pf.schema_arrow.names if c in TEXT_FIELDS] or None
    n = max(1, pf.num_row_groups)
    for i in range(pf.num_row_groups):
        for rec in pf.read_row_group(i, columns=cols).to_pylist():
            yield _record_text(rec)
        bar.update(int(bar.total * (i + 1) / n))


def _text_texts(path: Path, bar: ProgressBar) -> Iterator[str]:
    with _open_text(path, bar) as fh:
        for line in fh:
            yield line


def iter_texts(path: Path, bar: ProgressBar) -> Iterable[str]:
    """The text of each record of ``path``, by its suffix."""
    suffix = "".join(path.suffixes[-1:]).lower()
    if suffix in (".jsonl", ".ndjson"):
        return _jsonl_texts(path, bar)
    if suffix == ".json":
        return _json_texts(path, bar)
    if suffix in (".csv", ".tsv"):
        return _csv_texts(path, bar, "\t" if suffix == ".tsv" else ",")
    if suffix in (".parquet", ".pq"):
        return _parquet_texts(path, bar)
    if suffix in (".txt", ".text", ".md", ""):
        return _text_texts(path, bar)
    raise InputError(FIELD, "unsupported dataset file type", value=path.name,
                     accepted=[".jsonl", ".json", ".csv", ".tsv", ".parquet", ".txt"])


def local_tokenizer(model_ref: Optional[str]) -> Any:
    """A ``tokenizers.Tokenizer`` from a local model folder (or a file next to a local
    ``config.json``) holding ``tokenizer.json``; ``None`` when there is none or the library is
    missing."""
    if not model_ref:
        return None
    p = Path(model_ref)
    folder = p if p.is_dir() else (p.parent if p.is_file() else None)
    if folder is None or not (folder / "tokenizer.json").is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    try:
        return Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception:
        return None


def count_dataset_tokens(path: str, *, model_ref: Optional[str] = None,
                         progress: Optional[bool] = None) -> TokenCount:
    """Tokens in a dataset file: exact with a local tokenizer (``model_ref``: a model folder
    or its ``config.json``), else characters / ``CHARS_PER_TOKEN``."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise InputError(FIELD, "no such file", value=str(path))
    size = p.stat().st_size
    bar = ProgressBar(size, enabled=_show_progress(size) if progress is None else progress)
    tok = local_tokenizer(model_ref)
    tokens = chars = records = 0
    try:
        for text in iter_texts(p, bar):
            records += 1
            chars += len(text)
            if tok is not None and text:
                tokens += len(tok.encode(text, add_special_tokens=False).ids)
    except UnicodeDecodeError as exc:
        raise InputError(FIELD, f"{p.name}: not UTF-8 text ({exc.reason})",
                         value=str(path)) from None
    except OSError as exc:
        raise InputError(FIELD, f"{p.name}: cannot read ({exc.strerror})",
                         value=str(path)) from None
    finally:
        bar.close()
    if records == 0 or chars == 0:
        raise InputError(FIELD, f"{p.name}: no text found (looked for fields "
                         f"{', '.join(TEXT_FIELDS[:6])}, ...)", value=str(path))
    if tok is not None:
        return TokenCount(tokens=tokens, records=records, characters=chars,
                          method=f"tokenizer.json of {model_ref}")
    est = int(round(chars / CHARS_PER_TOKEN))
    return TokenCount(tokens=est, records=records, characters=chars,
                      method=f"~{CHARS_PER_TOKEN:g} characters per token (no local tokenizer)")


def needs_counting(workload: "Workload") -> bool:
    """Whether the workload is sized by its ``dataset_path`` alone: a file is named and
    ``max_steps``, ``dataset_tokens`` and ``num_samples`` (which take precedence) are unset."""
    return bool(workload.dataset_path) and workload.max_steps is None \
        and workload.dataset_tokens is None and workload.num_samples is None


def resolve_dataset(job: "Job", *, progress: Optional[bool] = None
                    ) -> tuple["Job", Optional[str]]:
    """``job`` with its ``dataset_path`` counted once into ``workload.dataset_tokens`` (the
    path is kept), and the origin of the count (``"data.jsonl: 10 records, 4,000 characters,
    ~4 characters per token (no local tokenizer)"``); ``(job, None)`` when the job is not a
    training job or is sized otherwise (:func:`needs_counting`). The tokenizer is the job's
    model's when the model is a local folder with ``tokenizer.json``."""
    if job.mode != "training" or not needs_counting(job.workload):
        return job, None
    path = str(job.workload.dataset_path)
    counted = count_dataset_tokens(path, model_ref=job.model, progress=progress)
    if counted.tokens <= 0:
        raise InputError(FIELD, f"{Path(path).name}: the tokenizer gives no tokens "
                         f"({counted.method})", value=path)
    origin = (f"{Path(path).name}: {counted.records:,} records, {counted.characters:,} "
              f"characters, {counted.method}")
    return job.evolve(workload={"dataset_tokens": float(counted.tokens)}), origin


__all__ = ["CHARS_PER_TOKEN", "FIELD", "PROGRESS_MIN_BYTES", "TEXT_FIELDS", "ProgressBar",
           "TokenCount", "count_dataset_tokens", "iter_texts", "local_tokenizer",
           "needs_counting", "resolve_dataset"]
