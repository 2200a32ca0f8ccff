"""One renderer for every command's tables, CSV, prose lines and progress.

People at a terminal get tables with a bold header and a rule under it (drawn by rich); a pipe or a
file gets the same columns as plain text (two spaces between columns, no ANSI escapes), so
scripts that ``grep``/``awk`` the output keep working. ``--format csv`` goes through
:func:`csv_text`. Progress goes to stderr only: a rich bar on a terminal, a plain line per update
(at most one every ``min_interval_s``) when stderr is a file, so stdout stays the answer.

**Width** (:func:`output_width`): a terminal's width (``COLUMNS`` honoured); when piped, the
``COLUMNS`` environment variable when it is set (``COLUMNS=80 fmest plan | less``), else no limit
(one line per row, as scripts expect).

**A table never drops a character.** Right-aligned columns hold numbers: they are printed in full,
right-aligned, never wrapped, folded or cropped. When the table is wider than the width:

1. text (left-aligned) columns shrink first, down to their longest word, their cells wrapping
   at word boundaries (a row then takes several lines);
2. if that is still too wide, the table is split into parts, each a group of whole columns for
   every row, each part repeating the key column (the first ``key`` columns, default the first)
   so a row can be followed across parts; parts are separated by a blank line. This keeps each
   part a table (numbers of one kind line up under each other, which a vertical layout loses);
3. if even the key column and one other column do not fit, each row is printed vertically as
   ``field: value`` lines (a blank line between rows).

Lines of prose (notes, warnings, verdicts) go through :func:`wrap`: word boundaries only, never
mid-word, continuation lines indented. Colour (:func:`paint`: the verdict green or red) only on
a terminal and never when ``NO_COLOR`` is set.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import sys
import textwrap
import time
from typing import Any, Iterable, Iterator, Literal, Optional, Sequence, TextIO

from attrs import frozen

Align = Literal["left", "right"]
ALIGNS: tuple[Align, ...] = ("left", "right")

#: no table or prose is laid out narrower than this (a tiny terminal still gets every character)
MIN_WIDTH = 20
#: the width of a terminal whose size cannot be read
DEFAULT_TERMINAL_WIDTH = 80
#: spaces between columns: plain text; rich (right padding 1 + the blank divider)
PLAIN_GAP, RICH_GAP = 2, 2


@frozen(kw_only=True)
class Column:
    """One column: its header (a contract: scripts read these names) and its alignment (right:
    a number, printed whole; left: text, may wrap at word boundaries)."""

    name: str
    align: Align = "left"


def is_tty(stream: Optional[TextIO] = None) -> bool:
    """True when ``stream`` (default stdout) is a terminal; closed or odd streams are not."""
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def output_width(tty: Optional[bool] = None) -> Optional[int]:
    """The width to lay out for: on a terminal (``tty``, default: is stdout one) its width
    (``COLUMNS`` first); piped, ``COLUMNS`` when set to a number, else ``None`` (no limit). Never
    below :data:`MIN_WIDTH`."""
    if tty if tty is not None else is_tty():
        import shutil

        cols = shutil.get_terminal_size((DEFAULT_TERMINAL_WIDTH, 24)).columns
        return max(MIN_WIDTH, cols or DEFAULT_TERMINAL_WIDTH)
    env = os.environ.get("COLUMNS", "").strip()
    return max(MIN_WIDTH, int(env)) if env.isdigit() and int(env) > 0 else None


def use_color(tty: Optional[bool] = None) -> bool:
    """Colour only on a terminal and only without ``NO_COLOR`` (https://no-color.org)."""
    return bool(tty if tty is not None else is_tty()) and not os.environ.get("NO_COLOR")


_STYLES = {"green": "32", "red": "31", "bold": "1", "yellow": "33"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def paint(text: str, style: str, *, tty: Optional[bool] = None) -> str:
    """``text`` in ``style`` (green, red, yellow, bold) on a colour terminal, unchanged
    otherwise (:func:`use_color`)."""
    if not use_color(tty):
        return text
    return f"\x1b[{_STYLES[style]}m{text}\x1b[0m"


def wrap(text: str, *, width: Optional[int] | Literal["auto"] = "auto",
         tty: Optional[bool] = None, hanging: Optional[str] = None) -> str:
    """One line of prose wrapped to ``width`` (default :func:`output_width` of ``tty``; ``None``:
    no limit, the text unchanged) at word boundaries
    only (a word longer than the width gets a line of its own, whole). Continuation lines get
    ``hanging`` (default: the line's own indent plus two spaces, or the column after a
    ``label  `` head such as ``model    ``)."""
    width = output_width(tty) if width == "auto" else width
    if width is None:
        return text
    if "\n" in text:
        return "\n".join(wrap(line, width=width, hanging=hanging) for line in text.split("\n"))
    if len(text) <= width or not text.strip():
        return text
    lead = text[:len(text) - len(text.lstrip(" "))]
    if hanging is None:
        head = re.match(r"^( *\S+ {2,})(?=\S)", text)
        hanging = " " * len(head.group(1)) if head and len(head.group(1)) <= width // 3 \
            else lead + "  "
    return "\n".join(textwrap.wrap(text, width, initial_indent=lead, subsequent_indent=hanging,
                                   break_long_words=False, break_on_hyphens=False))


def _wrap_cell(text: str, width: int) -> list[str]:
    out: list[str] = []
    for part in text.split("\n"):
        out.extend(textwrap.wrap(part, max(1, width), break_long_words=False,
                                 break_on_hyphens=False) or [""])
    return out


def _columns(columns: Sequence[Column | str]) -> list[Column]:
    out = [c if isinstance(c, Column) else Column(name=str(c)) for c in columns]
    for c in out:
        if c.align not in ALIGNS:
            raise ValueError(f"column {c.name!r}: align must be one of {ALIGNS}, got {c.align!r}")
    return out


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


# -- layout ------------------------------------------------------------------------------------

def _longest(cells: Iterable[str], *, words: bool) -> int:
    n = 0
    for cell in cells:
        for line in cell.split("\n"):
            n = max(n, max((len(w) for w in line.split()), default=0) if words else len(line))
    return n


@frozen
class _Stats:
    """A column's widths: ``natural`` (its longest cell or header), ``least`` (a number's
    natural width; text: its longest word) and each cell's length (to count wrapped cells)."""

    natural: int
    least: int
    lengths: tuple[int, ...]


def _stats(col: Column, cells: Sequence[str]) -> _Stats:
    natural = _longest(cells, words=False)
    least = natural if col.align == "right" else _longest(cells, words=True)
    return _Stats(natural, least, tuple(_longest([c], words=False) for c in cells))


def _needs(stats: Sequence[_Stats], gap: int, attr: str) -> int:
    return sum(getattr(s, attr) for s in stats) + gap * (len(stats) - 1)


def _fit(stats: Sequence[_Stats], avail: Optional[int], gap: int) -> Optional[list[int]]:
    """Widths within ``avail``: the natural ones when they fit; else text columns narrowed one
    character at a time, each time the column where the fewest cells (header included) start
    to wrap (the widest on a tie); ``None`` when even the least widths are too wide."""
    widths = [s.natural for s in stats]
    if avail is None:
        return widths
    over = _needs(stats, gap, "natural") - avail
    if over > 0 and _needs(stats, gap, "least") > avail:
        return None
    while over > 0:
        _, _, j = min((sum(n > w - 1 for n in s.lengths), -w, j)
                      for j, (s, w) in enumerate(zip(stats, widths, strict=True))
                      if w > s.least)
        widths[j] -= 1
        over -= 1
    return widths


def _lines_of(cols: list[Column], widths: list[int], cells: list[str]) -> list[list[str]]:
    """One row's physical lines: each cell wrapped to its width, padded and aligned."""
    wrapped = [c.split("\n") if col.align == "right" else _wrap_cell(c, w)
               for col, c, w in zip(cols, cells, widths, strict=True)]
    height = max((len(w) for w in wrapped), default=1)
    return [[(part[i] if i < len(part) else "").rjust(w) if col.align == "right"
             else (part[i] if i < len(part) else "").ljust(w)
             for col, part, w in zip(cols, wrapped, widths, strict=True)]
            for i in range(height)]


def _parts(cols: list[Column], body: list[list[str]], avail: Optional[int], gap: int,
           key: int) -> Optional[list[tuple[list[int], list[int]]]]:
    """Column groups (indices, widths), each repeating the first ``key`` columns, that fit
    ``avail``; one group when the whole table fits; ``None`` when no split fits."""
    stats = [_stats(c, [c.name, *(row[j] for row in body)]) for j, c in enumerate(cols)]
    everything = list(range(len(cols)))
    widths = _fit(stats, avail, gap)
    if widths is not None:
        return [(everything, widths)]
    assert avail is not None
    key = max(1, min(key, len(cols) - 1))
    keys, rest = everything[:key], everything[key:]
    # the fewest parts that fit; among the ways to cut the columns into that many runs, the
    # one that needs the least narrowing (fewest wrapped cells)
    for n_parts in range(2, len(rest) + 1):
        best: Optional[tuple[int, list[list[int]]]] = None
        for cuts in _cuts(len(rest), n_parts):
            runs = [keys + rest[a:b] for a, b in zip((0, *cuts), (*cuts, len(rest)),
                                                     strict=True)]
            if any(_needs([stats[i] for i in run], gap, "least") > avail for run in runs):
                continue
            cost = sum(max(0, _needs([stats[i] for i in run], gap, "natural") - avail)
                       for run in runs)
            if best is None or cost < best[0]:
                best = (cost, runs)
        if best is not None:
            return [(run, _fit([stats[i] for i in run], avail, gap) or []) for run in best[1]]
    return None


def _cuts(n: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Cut points splitting ``n`` columns into ``parts`` non-empty runs, in order (at most a
    few thousand: past that, runs of equal size)."""
    import itertools
    import math

    if math.comb(n - 1, parts - 1) <= 4000:
        yield from itertools.combinations(range(1, n), parts - 1)
    else:
        yield tuple(round(n * k / parts) for k in range(1, parts))


def _vertical(cols: list[Column], body: list[list[str]], avail: int, indent: str,
              bold: bool = False) -> list[str]:
    """Each row as ``field: value`` lines (values wrapped at word boundaries; a value too wide
    beside its label goes on the next lines)."""
    label_w = max(len(c.name) for c in cols) + 2
    out: list[str] = []
    for n, row in enumerate(body):
        if n:
            out.append("")
        for c, cell in zip(cols, row, strict=True):
            label = f"{c.name}:".ljust(label_w) if c.name else " " * label_w
            room = avail - label_w
            if bold and c.name:
                label = f"\x1b[1m{c.name}:\x1b[0m" + " " * (label_w - len(c.name) - 1)
            lines = [cell] if c.align == "right" or room <= 0 else _wrap_cell(cell, room)
            if room > 0 and max(len(x) for x in lines) <= room:
                out.append(indent + (label + lines[0]).rstrip())
                out.extend(indent + (" " * label_w + x).rstrip() for x in lines[1:])
            else:
                out.append(indent + label.rstrip())
                out.extend(indent + "  " + x for x in _wrap_cell(cell, max(1, avail - 2)))
    return out


def _layout(columns: Sequence[Column | str], rows: Iterable[Sequence[Any]], *,
            width: Optional[int], gap: int, indent: str, key: int, bold: bool = False):
    """("table", [(cols, widths, header, body-lines)...]) or ("vertical", lines)."""
    cols = _columns(columns)
    body = [[_cell(v) for v in row] for row in rows]
    for row in body:
        if len(row) != len(cols):
            raise ValueError(f"a row has {len(row)} cells for {len(cols)} columns: {row!r}")
    avail = None if width is None else max(MIN_WIDTH, width) - len(indent)
    parts = _parts(cols, body, avail, gap, key) if cols else [([], [])]
    if parts is None:
        assert avail is not None
        return "vertical", _vertical(cols, body, avail, indent, bold)
    out = []
    for idx, widths in parts:
        pc = [cols[i] for i in idx]
        out.append((pc, widths, _lines_of(pc, widths, [c.name for c in pc]),
                    [_lines_of(pc, widths, [row[i] for i in idx]) for row in body]))
    return "table", out


def plain_table(columns: Sequence[Column | str], rows: Iterable[Sequence[Any]], *,
                indent: str = "", width: Optional[int] = None, key: int = 1) -> str:
    """Aligned plain text: a header line, then one line per row (more when a text cell wraps),
    two spaces between columns, trailing spaces stripped; within ``width`` when given (see the
    module docstring)."""
    kind, laid = _layout(columns, rows, width=width, gap=PLAIN_GAP, indent=indent, key=key)
    if kind == "vertical":
        return "\n".join(laid)
    blocks = []
    for _, _, head, body in laid:
        lines = [indent + "  ".join(cells).rstrip() for cells in head]
        lines += [indent + "  ".join(cells).rstrip() for row in body for cells in row]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def rich_table(columns: Sequence[Column | str], rows: Iterable[Sequence[Any]], *,
               title: Optional[str] = None, width: Optional[int] = None,
               color: bool = True, indent: str = "", key: int = 1) -> str:
    """The same table drawn by rich for a terminal (ANSI styles when ``color``): bold header,
    a rule under it, the columns laid out as :func:`plain_table` lays them (never cropped)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    width = width or output_width(True) or DEFAULT_TERMINAL_WIDTH
    kind, laid = _layout(columns, rows, width=width, gap=RICH_GAP, indent=indent, key=key,
                         bold=color)
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, width=10**4,
                      highlight=False, color_system="standard" if color else None,
                      emoji=False, markup=False)
    if title:
        console.print(wrap(title, width=width), style="bold", markup=False)
    if kind == "vertical":   # labels bold already (plain escapes: rich would escape them)
        return (buf.getvalue() + "\n".join(laid)).rstrip("\n")
    for n, (cols, widths, head, body) in enumerate(laid):
        if n:
            console.print("")
        table = Table(box=box.SIMPLE_HEAD, header_style="bold", show_edge=False,
                      pad_edge=False, expand=False, padding=(0, 1, 0, 0))
        for j, (c, w) in enumerate(zip(cols, widths, strict=True)):  # cells pre-wrapped
            table.add_column("\n".join(cells[j].strip() for cells in head), justify=c.align,
                             no_wrap=True, overflow="fold", width=w, min_width=w, max_width=w)
        for row in body:
            table.add_row(*("\n".join(line[j].strip() for line in row)
                            for j in range(len(cols))))
        with console.capture() as cap:
            console.print(table)
        for line in cap.get().rstrip("\n").split("\n"):
            buf.write(indent + line.rstrip() + "\n" if ANSI.sub("", line).strip() else "\n")
    return buf.getvalue().rstrip("\n")


def render_table(columns: Sequence[Column | str], rows: Iterable[Sequence[Any]], *,
                 title: Optional[str] = None, tty: Optional[bool] = None,
                 indent: str = "", key: int = 1, width: Optional[int] = None) -> str:
    """Rich on a terminal, plain text otherwise (``tty`` default: is stdout a terminal), within
    ``width`` (default :func:`output_width`); ``key``: how many leading columns each part of a
    split table repeats."""
    rows = list(rows)
    tty = tty if tty is not None else is_tty()
    width = width if width is not None else output_width(tty)
    if tty:
        return rich_table(columns, rows, title=title, indent=indent, width=width,
                          color=use_color(tty), key=key)
    text = plain_table(columns, rows, indent=indent, width=width, key=key)
    return f"{wrap(title, width=width)}\n{text}" if title else text


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


def clock(seconds: float) -> str:
    """Elapsed or remaining time of a running task: whole seconds below two minutes (``42 s``,
    no ticking decimals), then :func:`fmest.output.units.duration` (``3.5 min``)."""
    from fmest.output.units import duration

    return f"{max(0.0, seconds):.0f} s" if seconds < 120 else duration(seconds)


def eta_seconds(elapsed: float, done: float, total: float) -> Optional[float]:
    """The one ETA rule of every progress display: the time left at the average rate so far
    (``None`` before the first step or without a total)."""
    if done <= 0 or total <= 0:
        return None
    return max(0.0, elapsed / done * (total - done))


def _rich_columns():
    """rich columns showing :func:`clock` of the elapsed time and, for a task with a total,
    ``ETA`` by :func:`eta_seconds` (rich's own remaining-time column uses another rate; one ETA
    shows, whatever the display)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Elapsed(ProgressColumn):
        def render(self, task) -> Text:
            return Text(clock(task.elapsed or 0.0), style="progress.elapsed")

    class Eta(ProgressColumn):
        def render(self, task) -> Text:
            if task.total is None:
                return Text("")
            eta = eta_seconds(task.elapsed or 0.0, task.completed, task.total)
            return Text("ETA " + ("-" if eta is None else clock(eta)),
                        style="progress.remaining")

    return Elapsed(), Eta()


class Progress:
    """Progress of a long run on stderr: a rich bar on a terminal, plain lines otherwise.

    ``enabled=None`` shows it on a terminal only. Plain lines (a log file, CI) come at most
    one per ``min_interval_s``, the first after ``min_interval_s`` has passed, and the last
    update prints only when an earlier one did: a quick run stays quiet, a slow one is
    followed. ``timing``: plain lines end with the elapsed time and the ETA (the bar always
    shows both). Either way the ETA is :func:`eta_seconds`, the only one shown: callers pass
    their own counts in ``detail``, never a second ETA. Use as a context manager or call
    :meth:`close`.
    """

    def __init__(self, label: str, total: int, *, enabled: Optional[bool] = None,
                 stream: Optional[TextIO] = None, min_interval_s: float = 0.0,
                 timing: bool = False) -> None:
        self.label, self.total, self.done = label, max(0, int(total)), 0
        self.stream = sys.stderr if stream is None else stream
        self.tty = is_tty(self.stream)
        self.enabled = self.tty if enabled is None else bool(enabled)
        self.min_interval_s = min_interval_s
        self.timing = timing
        self.started = time.monotonic()
        self._last = self.started if min_interval_s > 0 else float("-inf")
        self._printed = False
        self._bar = None
        if self.enabled and self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TextColumn("{task.fields[detail]}"),
                                     *_rich_columns(),
                                     console=Console(file=self.stream), transient=False)
            self._task = self._bar.add_task(label, total=self.total or None, detail="")
            self._bar.start()

    def timing_text(self, now: Optional[float] = None) -> str:
        """``elapsed 42 s, ETA 1.5 min`` at ``now`` (default: the clock)."""
        elapsed = (time.monotonic() if now is None else now) - self.started
        eta = eta_seconds(elapsed, self.done, self.total)
        return f"elapsed {clock(elapsed)}, ETA {'-' if eta is None else clock(eta)}"

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
                          + (f" {detail}" if detail else "")
                          + (f" ({self.timing_text(now)})" if self.timing else "") + "\n")
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
    """A task without steps (one traced run): on a terminal a spinner with ``message`` and the
    seconds elapsed (:func:`clock`, ticking), gone when the task ends; in a log, one line
    ``message: N s`` when it took :data:`STATUS_LOG_MIN_SECONDS` or more."""
    stream = sys.stderr if stream is None else stream
    start = time.monotonic()
    if is_tty(stream):
        from rich.console import Console
        from rich.progress import Progress as RichProgress
        from rich.progress import SpinnerColumn, TextColumn

        elapsed, _ = _rich_columns()
        with RichProgress(SpinnerColumn(), TextColumn("{task.description}"), elapsed,
                          console=Console(file=stream), transient=True) as spinner:
            spinner.add_task(message, total=None)
            yield
        return
    yield
    took = time.monotonic() - start
    if took >= STATUS_LOG_MIN_SECONDS:
        stream.write(f"{message}: {took:.1f} s\n")
        stream.flush()
