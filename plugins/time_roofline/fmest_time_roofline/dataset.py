"""Count the tokens of a dataset file (``--dataset FILE``): JSONL, JSON, CSV/TSV, Parquet, text.

With the model's tokenizer when one is available locally (a model folder holding
``tokenizer.json``; loaded with the ``tokenizers`` library, no network), otherwise by the
documented approximation of ``CHARS_PER_TOKEN`` characters per token. A tiny progress bar goes
to stderr when stderr is a terminal or the file is larger than ``PROGRESS_MIN_BYTES``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Iterable, Iterator, Optional

from attrs import frozen

from fmest.errors import InputError

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


@frozen(kw_only=True)
class TokenCount:
    tokens: int
    records: int
    characters: int
    method: str


class ProgressBar:
    """Bytes read of a dataset file, on stderr through :class:`fmest.render.Progress` (a bar on
    a terminal; in a log, a line with the percentage every few seconds)."""

    def __init__(self, total_bytes: int, *, enabled: bool, stream=None, width: int = 30):
        from fmest.render import Progress

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


def _record_text(rec) -> str:
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

    def __init__(self, fh, bar: ProgressBar):
        self.fh, self.bar, self.done = fh, bar, 0

    def readable(self):
        return True

    def readinto(self, b):
        n = self.fh.readinto(b)
        self.done += n or 0
        self.bar.update(self.done)
        return n


def _open_text(path: Path, bar: ProgressBar):
    raw = _Counted(open(path, "rb"), bar)
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
            raise InputError(FIELD, f"{path.name}: malformed CSV ({exc})", value=str(path)) from None


def _parquet_texts(path: Path, bar: ProgressBar) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(FIELD, "reading Parquet needs pyarrow (pip install "
                         "'fmest-time-roofline[parquet]'), or convert the file to JSONL",
                         value=str(path)) from None
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


def local_tokenizer(model_ref: Optional[str]):
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


def count_dataset_tokens(path: str, *, model=None, model_ref: Optional[str] = None,
                         progress: Optional[bool] = None) -> TokenCount:
    """Tokens in a dataset file: exact with a local tokenizer, else characters / 4."""
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
        raise InputError(FIELD, f"{p.name}: not UTF-8 text ({exc.reason})", value=str(path)) from None
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
