"""The original's exact-match lookup (``fm_training_estimator/regressor/lookup/lookup.py`` @
1d04f05): :class:`LookupRegressor` over a CSV of measured runs, without pandas.

The original reads the CSV with ``pandas.read_csv`` and answers ``run(X)`` with
``DataFrame.query`` (every key equal to its value) less the query's columns. This reads it with
the :mod:`csv` module and answers with a :class:`LookupResult`, a small table that supports
what the original's callers and tests use of the DataFrame: ``.empty``, ``.shape``, ``len()``,
``res["col"]`` (a :class:`Column`: indexable, sliceable, ``.item()``), ``res[0:1]`` (the first
rows), ``.columns`` and ``.rows`` (one dict per row).

Values are typed per column as ``read_csv`` types them: a column whose cells are all whole
numbers holds ints, one whose cells all parse as numbers (empty cells are NaN) floats, any
other column text (an empty cell there is ``None``). Matching: a number in the query equals a cell that parses to the same
number (``4`` matches ``4`` and ``4.0``); text equals the cell's text exactly; ``None`` matches
nothing (pandas' ``== None``). Differences, on purpose: ``res["col"][i]`` is by position (the
DataFrame's is by the row's label, its line in the file: ``[0]`` fails there unless the first
match is the first row); a missing or unreadable file, or a query key that is not a column,
raises :class:`fmest.errors.InputError` naming the path and the accepted headers or columns.
"""

from __future__ import annotations

import csv
import math
import numbers
import os
from typing import Any, Iterator, Optional, Sequence

from fmest.compat.fm_training_estimator.data import ACCEPTED_HEADERS, lookup_format_version
from fmest.errors import InputError


class Column(tuple):
    """One column of a :class:`LookupResult`: a tuple whose slices are columns too, with
    ``.item()`` (the one value; ``ValueError`` unless there is exactly one, as numpy says) and
    ``.tolist()``."""

    def __getitem__(self, index):  # type: ignore[override]
        got = super().__getitem__(index)
        return Column(got) if isinstance(index, slice) else got

    def item(self) -> Any:
        if len(self) != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        return self[0]

    def tolist(self) -> list:
        return list(self)

    @property
    def empty(self) -> bool:
        return not self


class LookupResult:
    """A table: ``columns`` (names in file order), ``rows`` (one dict per row) and
    ``row_numbers`` (each row's line in the file, the header being line 1)."""

    def __init__(self, columns: Sequence[str], rows: Sequence[dict[str, Any]],
                 row_numbers: Sequence[int] = (), path: str = "",
                 texts: Optional[Sequence[dict[str, str]]] = None) -> None:
        self.columns = tuple(columns)
        self.rows = [dict(r) for r in rows]
        self.row_numbers = tuple(row_numbers) or tuple(range(2, len(self.rows) + 2))
        self.path = path
        #: the cells as written (what text in a query is compared with)
        self.texts = [dict(t) for t in texts] if texts is not None else \
            [{c: "" if v is None else str(v) for c, v in r.items()} for r in self.rows]

    @property
    def empty(self) -> bool:
        """No rows or no columns (a DataFrame's ``empty``)."""
        return not self.rows or not self.columns

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.rows), len(self.columns)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[str]:  # a DataFrame iterates over its column names
        return iter(self.columns)

    def __getitem__(self, key):
        if isinstance(key, slice):
            return LookupResult(self.columns, self.rows[key], self.row_numbers[key], self.path,
                                self.texts[key])
        if isinstance(key, (list, tuple)):
            missing = [k for k in key if k not in self.columns]
            if missing:
                raise KeyError(missing[0])
            return LookupResult(key, [{k: r[k] for k in key} for r in self.rows],
                                self.row_numbers, self.path,
                                [{k: t[k] for k in key} for t in self.texts])
        if key not in self.columns:
            raise KeyError(key)
        return Column(r[key] for r in self.rows)

    def to_dict(self, orient: str = "records") -> list[dict[str, Any]]:
        """The rows as dicts (``orient="records"``, the only orient supported)."""
        if orient != "records":
            raise ValueError(f"only orient='records' is supported, not {orient!r}")
        return [dict(r) for r in self.rows]

    def __repr__(self) -> str:
        head = ", ".join(self.columns)
        return f"<LookupResult {len(self.rows)} rows x {len(self.columns)} columns: {head}>"


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def _whole(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _typed(cells: list[str]) -> list[Any]:
    """One column's cells typed as ``read_csv`` types them (see the module doc)."""
    filled = [c for c in cells if c != ""]
    if filled and len(filled) == len(cells) and all(_whole(c) for c in cells):
        return [int(c) for c in cells]
    if all(_number(c) is not None for c in filled):   # an all-empty column too: NaN
        return [float(c) if c != "" else math.nan for c in cells]
    return [c if c != "" else None for c in cells]


def read_table(path: str) -> LookupResult:
    """The CSV at ``path`` as a typed :class:`LookupResult` (every row), or an
    :class:`InputError` naming the path and the accepted headers."""
    field = str(path)
    if not os.path.isfile(path):
        raise InputError(field, "no such lookup data file (a CSV whose header is one of the "
                         "accepted ones)", accepted=ACCEPTED_HEADERS)
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            lines = [row for row in csv.reader(fh)]
    except OSError as exc:
        raise InputError(field, f"cannot read: {exc.strerror or exc}",
                         accepted=ACCEPTED_HEADERS) from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise InputError(field, f"not a readable CSV file: {exc}",
                         accepted=ACCEPTED_HEADERS) from None
    numbered = [(n, row) for n, row in enumerate(lines, 1) if row]   # blank lines are skipped
    if not numbered:
        raise InputError(field, "empty: no header row", accepted=ACCEPTED_HEADERS)
    header = [c.strip() for c in numbered[0][1]]
    if len(set(header)) != len(header) or "" in header:
        raise InputError(field, f"header {','.join(header)!r} has an empty or repeated column "
                         "name", accepted=ACCEPTED_HEADERS)
    body = numbered[1:]
    for n, row in body:
        if len(row) > len(header):
            raise InputError(field, f"line {n} has {len(row)} fields, the header "
                             f"{len(header)}", accepted=ACCEPTED_HEADERS)
    texts = [{h: row[i] if i < len(row) else "" for i, h in enumerate(header)}
             for _n, row in body]
    cells = {h: _typed([t[h] for t in texts]) for h in header}
    rows = [{h: cells[h][k] for h in header} for k in range(len(body))]
    return LookupResult(header, rows, [n for n, _row in body], field, texts)


def _matches(text: str, wanted: Any) -> bool:
    """Whether a cell, as written (``text``), equals the query's value (module doc)."""
    if wanted is None:
        return False
    if isinstance(wanted, numbers.Real):
        number = _number(text)
        return number is not None and number == float(wanted)
    return text == str(wanted)


class LookupRegressor:
    """Exact-match lookup in a CSV of measured runs (the original's interface)."""

    def __init__(self, data_path: Optional[str] = None) -> None:
        self.data: Optional[LookupResult] = None
        self.data_path: Optional[str] = None
        if data_path is not None:
            self.load(data_path)

    def load(self, data_path: str) -> None:
        """Read the CSV at ``data_path`` (:class:`InputError` when missing or unreadable)."""
        self.data = read_table(os.fspath(data_path))
        self.data_path = os.fspath(data_path)

    def _table(self) -> LookupResult:
        if self.data is None:
            raise InputError("data_path", "no lookup data loaded: give LookupRegressor a path "
                             "or call load(path) first")
        return self.data

    def get_data_format(self) -> str:
        """The format version of the CSV's header (``v1``/``v2``/``v3``), else
        ``"undefined"`` (the original's answer; :meth:`check_data_format` raises instead)."""
        return lookup_format_version(",".join(self._table().columns))

    def check_data_format(self) -> str:
        """:meth:`get_data_format`, or an :class:`InputError` naming the path and the
        accepted headers when the header is none of them."""
        version = self.get_data_format()
        if version == "undefined":
            raise InputError(str(self.data_path), "its header "
                             f"{','.join(self._table().columns)!r} is none of "
                             "fm-training-estimator's data formats (columns exactly, in order)",
                             accepted=ACCEPTED_HEADERS)
        return version

    def run(self, X: dict) -> LookupResult:
        """The rows whose every column named in ``X`` equals its value, without those
        columns."""
        table = self._table()
        for key in X:
            if key not in table.columns:
                raise InputError(str(key), f"not a column of {self.data_path}",
                                 accepted=table.columns)
        hits = [k for k, text in enumerate(table.texts)
                if all(_matches(text[key], val) for key, val in X.items())]
        keep = [c for c in table.columns if c not in X]
        return LookupResult(keep, [{c: table.rows[k][c] for c in keep} for k in hits],
                            [table.row_numbers[k] for k in hits], table.path,
                            [{c: table.texts[k][c] for c in keep} for k in hits])


__all__ = ["LookupRegressor", "LookupResult", "Column", "read_table"]
