"""One renderer for every command's tables, CSV and progress.

People at a terminal get rich tables (bold header, aligned columns, colour); a pipe or a file
gets the same columns as plain text (two spaces between columns, no ANSI escapes), so scripts
that ``grep``/``awk`` the output keep working. ``--format csv`` goes through :func:`csv_text`.
Progress goes to stderr only: a rich bar on a terminal, a plain line per update (at most one
every ``min_interval_s``) when stderr is a file, so stdout stays the answer.
"""

from __future__ import annotations

import contextlib
import csv
import io
import sys
import time
from typing import Any, Iterable, Iterator, Literal, Optional, Sequence, TextIO

from attrs import frozen

Align = Literal["left", "right"]
ALIGNS: tuple[Align, ...] = ("left", "right")


@frozen(kw_only=True)
class Column:
    """One column: its header (a contract: scripts read these names) and its alignment."""

    name: str
    align: Align = "left"


def is_tty(stream: Optional[TextIO] = None) -> bool:
    """True when ``stream`` (default stdout) is a terminal; closed or odd streams are not."""
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _columns(columns: Sequence[Column | str]) -> list[Column]:
    out = [c if isinstance(c, Column) else Column(name=str(c)) for c in columns]
    for c in out:
        if c.align not in ALIGNS:
            raise ValueError(f"column {c.name!r}: align must be one of {ALIGNS}, got {c.align!r}")
    return out


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def plain_table(columns: Sequence[Column | str], rows: Iterable[Sequence[Any]], *,
                indent: str = "") -> str:
    """Aligned plain text: a header line, then one line per row, two spaces between columns,
    trailing spaces stripped."""
    cols = _columns(columns)
    body = [[_cell(v) for v in row] for row in rows]
    head = [c.name for c in cols]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)] if cols else []

    def line(cells: list[str]) -> str:
        return indent + "  ".join(cell.rjust(w) if c.align == "right" else cell.ljust(w)
                                  for c, cell, w in zip(cols, cells, widths, strict=True)).rstrip()

    return "\n".join([line(head)] + [line(b) for b in body])


def rich_table(columns: Sequence[Column | str], rows: Iterable[Sequence[Any]], *,
               title: Optional[str] = None, width: Optional[int] = None,
               color: bool = True, indent: str = "") -> str:
    """The same table drawn by rich for a terminal (ANSI styles when ``color``)."""
    from rich import box
    from rich.console import Console
    from rich.padding import Padding
    from rich.table import Table

    cols = _columns(columns)
    table = Table(title=title, box=box.SIMPLE_HEAD, header_style="bold", title_justify="left",
                  show_edge=False, pad_edge=False)
    for c in cols:
        table.add_column(c.name, justify=c.align, no_wrap=True, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color,
                      width=width or _terminal_width(), highlight=False,
                      color_system="standard" if color else None)
    console.print(Padding(table, (0, 0, 0, len(indent)), expand=False) if indent else table)
    return buf.getvalue().rstrip("\n")


def _terminal_width() -> int:
    import shutil

    return max(80, shutil.get_terminal_size((120, 24)).columns)


def render_table(columns: Sequence[Column | str], rows: Iterable[Sequence[Any]], *,
                 title: Optional[str] = None, tty: Optional[bool] = None,
                 indent: str = "") -> str:
    """Rich on a terminal, plain text otherwise (``tty`` default: is stdout a terminal)."""
    rows = list(rows)
    if tty if tty is not None else is_tty():
        return rich_table(columns, rows, title=title, indent=indent)
    text = plain_table(columns, rows, indent=indent)
    return f"{title}\n{text}" if title else text


def csv_text(fields: Sequence[str], rows: Iterable[dict[str, Any]]) -> str:
    """``--format csv``: a header of ``fields`` and one line per row dict (keys outside
    ``fields`` left out, missing ones empty; lists joined with ``;``, mappings as JSON)."""
    import json

    def cell(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return ";".join(map(str, value))
        if isinstance(value, dict):
            return json.dumps(value, sort_keys=True, default=str)
        return value

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: cell(v) for k, v in row.items()})
    return buf.getvalue()


class Progress:
    """Progress of a long run on stderr: a rich bar on a terminal, plain lines otherwise.

    ``enabled=None`` shows it on a terminal only. Plain lines (a log file, CI) come at most
    one per ``min_interval_s``, the first after ``min_interval_s`` has passed, and the last
    update prints only when an earlier one did: a quick run stays quiet, a slow one is
    followed. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, label: str, total: int, *, enabled: Optional[bool] = None,
                 stream: Optional[TextIO] = None, min_interval_s: float = 0.0) -> None:
        self.label, self.total, self.done = label, max(0, int(total)), 0
        self.stream = sys.stderr if stream is None else stream
        self.tty = is_tty(self.stream)
        self.enabled = self.tty if enabled is None else bool(enabled)
        self.min_interval_s = min_interval_s
        self._last = time.monotonic() if min_interval_s > 0 else float("-inf")
        self._printed = False
        self._bar = None
        if self.enabled and self.tty:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TextColumn("{task.fields[detail]}"),
                                     TimeElapsedColumn(), TimeRemainingColumn(),
                                     console=Console(file=self.stream), transient=False)
            self._task = self._bar.add_task(label, total=self.total or None, detail="")
            self._bar.start()

    def update(self, done: Optional[int] = None, *, advance: int = 0, detail: str = "",
               force: bool = False) -> None:
        """Set ``done`` (or add ``advance``) and show ``detail`` beside the count (``force``:
        print a plain line now, whatever the interval)."""
        self.done = done if done is not None else self.done + advance
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, detail=detail)
            return
        now = time.monotonic()
        last = self.done >= self.total
        if not force and ((not last and now - self._last < self.min_interval_s)
                          or (last and self.min_interval_s > 0 and not self._printed)):
            return
        self._last, self._printed = now, True
        self.stream.write(f"{self.label}: {self.done}/{self.total}"
                          + (f" {detail}" if detail else "") + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


#: A task shorter than this leaves no line in a log (a cached or tiny trace stays quiet).
STATUS_LOG_MIN_SECONDS = 2.0


@contextlib.contextmanager
def status(message: str, *, stream: Optional[TextIO] = None) -> Iterator[None]:
    """A task without steps (one traced run): a spinner with ``message`` on a terminal; in a
    log, one line ``message: N s`` when it took :data:`STATUS_LOG_MIN_SECONDS` or more."""
    stream = sys.stderr if stream is None else stream
    start = time.monotonic()
    if is_tty(stream):
        from rich.console import Console

        with Console(file=stream).status(message):
            yield
        return
    yield
    took = time.monotonic() - start
    if took >= STATUS_LOG_MIN_SECONDS:
        stream.write(f"{message}: {took:.1f} s\n")
        stream.flush()
