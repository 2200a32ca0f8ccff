"""Errors that reach users.

Every error a user can cause is an :class:`FmestError` whose message names the field (as a path
such as ``training.micro_batch_size`` or a CLI flag) and, where the values are enumerable, the
accepted values. The CLI prints ``str(error)`` on one line and exits with code 2; with
``--format json`` it prints :func:`error_object` on stdout instead, the same object the service
(``fmest serve``) answers with.
"""

from __future__ import annotations

from typing import Any, Iterable


class FmestError(Exception):
    """Base class of every error fmest raises on purpose."""


class InputError(FmestError, ValueError):
    """A value a user gave is malformed or out of range.

    ``field`` is the path of the offending value, ``accepted`` (optional) lists what would be
    accepted, ``value`` is what was given.
    """

    def __init__(self, field: str, message: str, *, value: object = None,
                 accepted: Iterable[object] | None = None) -> None:
        self.field = field
        #: what is wrong, without the field, the value or the accepted values
        self.message = message
        self.value = value
        self.accepted = list(accepted) if accepted is not None else None
        text = f"{field}: {message}"
        if value is not None:
            text += f" (got {value!r})"
        if self.accepted:
            shown = ", ".join(str(a) for a in self.accepted[:25])
            more = f", ... ({len(self.accepted) - 25} more)" if len(self.accepted) > 25 else ""
            text += f"; accepted: {shown}{more}"
        super().__init__(text)


    def at(self, field: str) -> "InputError":
        """The same error named by another field (the file key or flag a job field came from,
        a section prefix): message, value and accepted values travel as they are."""
        return type(self)(field, self.message, value=self.value, accepted=self.accepted)


class UnknownNameError(InputError):
    """A name (model, GPU, optimizer, policy, ...) that no registry knows."""


class NotTrainingError(InputError):
    """A config file that is a recipe of another kind (evaluation, quantization, merge, export,
    ...), refused with the key that says so (:meth:`fmest.configs._base.Sink.not_training`)."""


class PluginError(FmestError):
    """A plugin failed to load or answered with something that breaks the hook contract."""

    def __init__(self, plugin: str, message: str) -> None:
        self.plugin = plugin
        super().__init__(f"plugin {plugin!r}: {message}")


class DuplicateRegistrationError(FmestError):
    """Two sources registered the same key in one registry."""


class InfeasibleError(FmestError):
    """A configuration that cannot run (e.g. a model that does not fit at micro-batch 1).

    Raised by formulas and caught by searches (``max_micro_batch``) and the engine, which turn it
    into a result instead of a crash.
    """


def near_names(name: str, candidates: Iterable[str], n: int = 5) -> list[str]:
    """The candidates closest to ``name`` (case-insensitive), for 'did you mean' messages."""
    import difflib

    cands = list(candidates)
    lowered = {c.lower(): c for c in cands}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.4)
    subs = [c for c in cands if name.lower() in c.lower() and c not in hits]
    return [lowered[h] for h in hits] + subs[: max(0, n - len(hits))]


def error_body(field: str | None, message: str, accepted: Any = None) -> dict:
    """The JSON error shape every machine-facing door uses (``fmest ... --format json`` on
    stdout, ``fmest serve`` with 422): ``{"error": {"field", "message", "accepted"}}``."""
    return {"error": {"field": field, "message": message,
                      "accepted": list(accepted) if accepted else []}}


def json_field(field: str) -> str:
    """A field by its JSON name: a flag without ``--`` and with ``_`` (``--seq-len`` ->
    ``seq_len``, the name the service's body takes); ``-f/--input-file`` is ``input``."""
    if field == "--input-file":
        return "input"
    if not field.startswith("--"):
        return field
    flag, sep, rest = field.partition(" ")   # "--zero (-> parallelism.zero_stage)": the flag only
    return flag[2:].replace("-", "_") + sep + rest


def error_object(exc: BaseException) -> dict:
    """:func:`error_body` of an error: an :class:`InputError` keeps its field (JSON name),
    message (without the field prefix) and accepted values; any other error has field null."""
    if not isinstance(exc, InputError):
        return error_body(None, str(exc))
    text = str(exc)
    prefix = f"{exc.field}: "
    return error_body(json_field(exc.field),
                      text[len(prefix):] if text.startswith(prefix) else text,
                      [a if isinstance(a, (str, int, float, bool)) else str(a)
                       for a in exc.accepted or []])
