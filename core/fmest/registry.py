"""Registries filled by the ``fmest_register_*`` hooks.

Keys are case-insensitive; a duplicate key fails loudly and names both sources. Lookups of an
unknown key raise :class:`fmest.errors.UnknownNameError` with the nearest names.
"""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from fmest.errors import DuplicateRegistrationError, UnknownNameError, near_names

T = TypeVar("T")


def _norm(key: str) -> str:
    return key.strip().lower()


class Registry(Generic[T]):
    """Named items with aliases. ``field`` is the user-facing field name used in errors."""

    def __init__(self, kind: str, field: str) -> None:
        self.kind = kind
        self.field = field
        self._items: dict[str, T] = {}
        self._keys: dict[str, tuple[str, str]] = {}  # normalised key -> (canonical name, source)

    def add(self, name: str, item: T, *, aliases=(), source: str = "") -> None:
        for key in (name, *aliases):
            k = _norm(key)
            if k in self._keys:
                other_name, other_src = self._keys[k]
                if other_name == name and other_src == source:
                    continue
                raise DuplicateRegistrationError(
                    f"{self.kind} {key!r} registered twice: by {other_src or '?'} "
                    f"(as {other_name!r}) and by {source or '?'} (as {name!r})")
            self._keys[k] = (name, source)
        self._items[name] = item

    def get(self, key: str) -> T:
        hit = self._keys.get(_norm(key))
        if hit is None:
            raise UnknownNameError(self.field, f"unknown {self.kind}", value=key,
                                   accepted=near_names(key, self.all_keys()) or self.names())
        return self._items[hit[0]]

    def find(self, key: str) -> T | None:
        hit = self._keys.get(_norm(key))
        return self._items[hit[0]] if hit else None

    def canonical(self, key: str) -> str | None:
        """The registered name ``key`` (a name or alias, any case) stands for, or ``None``."""
        hit = self._keys.get(_norm(key))
        return hit[0] if hit else None

    def aliases_of(self, name: str) -> list[str]:
        """Every key registered for ``name`` other than the name itself."""
        return [k for k, (canon, _src) in self._keys.items()
                if canon == name and k != _norm(name)]

    def source_of(self, name: str) -> str:
        return self._keys[_norm(name)][1]

    def names(self) -> list[str]:
        return list(self._items)

    def all_keys(self) -> list[str]:
        names = {k: v[0] for k, v in self._keys.items()}
        return sorted(set(self._items) | {k for k in names})

    def items(self) -> Iterator[tuple[str, T]]:
        return iter(self._items.items())

    def values(self) -> list[T]:
        return list(self._items.values())

    def __contains__(self, key: str) -> bool:
        return _norm(key) in self._keys

    def __len__(self) -> int:
        return len(self._items)


class ListRegistry(Generic[T]):
    """Items without unique names (price quotes), each remembered with its source."""

    def __init__(self, kind: str, key: Callable[[T], tuple] | None = None) -> None:
        self.kind = kind
        self._key = key
        self._items: list[tuple[T, str]] = []
        self._seen: dict[tuple, str] = {}

    def add(self, item: T, *, source: str = "") -> None:
        if self._key is not None:
            k = self._key(item)
            if k in self._seen:
                raise DuplicateRegistrationError(
                    f"{self.kind} {k!r} registered twice: by {self._seen[k]} and by {source}")
            self._seen[k] = source
        self._items.append((item, source))

    def values(self) -> list[T]:
        return [i for i, _ in self._items]

    def with_sources(self) -> list[tuple[T, str]]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)
