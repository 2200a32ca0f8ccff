"""What every config importer shares: the per-file collector and value coercion.

An importer walks *every* key of its file and, for each, either sets a job field (with the key
path it came from) or records why it is ignored; a bad value raises :class:`InputError` naming
the file, the key path and the accepted values.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from fmest.errors import InputError, NotTrainingError

# Reasons shared by several formats.
NOT_ESTIMATED = "does not change per-GPU memory, time or cost in fmest's model"
#: The recipe kinds that are not training (:meth:`Sink.not_training`).
NOT_TRAINING = ("evaluation", "quantization", "merge", "export", "conversion", "data preparation")
LOGGING = "logging, saving or evaluation only; does not change training memory, time or cost"
HYPERPARAM = "an optimisation hyperparameter; does not change memory, time or cost"
DATA = ("fmest does not read the tool's datasets; give --dataset-tokens, --num-samples or "
        "--dataset to size the run")


def _real_key(key: str) -> bool:
    """A key path of the file (not a note such as ``(axolotl config)`` or a default's
    ``key (unset: ...)``)."""
    return bool(key) and not key.startswith("(") and "(unset" not in key


def join(prefix: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else str(key)


class Sink:
    """What one file says: job fields (with the key path each came from), ignored keys with the
    reason, DeepSpeed ``"auto"`` placeholders, included files and batch-size constraints."""

    def __init__(self, name: str, path: str | None, fmt: str) -> None:
        self.name = name
        self.path = path
        self.format = fmt
        self.dir = os.path.dirname(os.path.abspath(path)) if path else os.getcwd()
        self.values: dict[str, tuple[Any, str]] = {}
        self.ignored: list[str] = []
        #: keys read but not modelled that may change the answer: ``"key: reason"``, printed
        #: as a warning in every output format (never summarised away)
        self.not_modelled: list[str] = []
        self.autos: dict[str, list[str]] = {}
        self.includes: list[tuple[str, str, str]] = []  # (path on disk, display name, format)
        self.train_batch: list[tuple[int, str]] = []  # DeepSpeed train_batch_size, key path
        self.master_keys: dict[str, str] = {}  # DeepSpeed owns the precision policy: dtype -> key

    # -- recording ------------------------------------------------------------------------
    def set(self, field: str, value: Any, key: str) -> None:
        prev = self.values.pop(field, None)  # re-insert so the order follows the file
        if prev is not None and _real_key(prev[1]) and _real_key(key) and prev[1] != key:
            # two keys of one file set the same field: both were read, the later one wins
            if prev[0] == value:
                key = f"{prev[1]}+{key}" if prev[1] not in key.split("+") else key
            else:
                self.ignore(prev[1], f"overridden by {key} in the same file ({field} = "
                            f"{value!r})")
        self.values[field] = (value, key)

    def set_when_true(self, field: str, on: Any, key: str, value: Any,
                      reason_if_false: str = "false") -> None:
        """A boolean switch: set ``field`` to ``on`` when ``value`` is true, else record the key
        as ignored (nothing is dropped silently)."""
        if self.bool_(key, value):
            self.set(field, on, key)
        else:
            self.ignore(key, reason_if_false)

    def get(self, field: str, default: Any = None) -> Any:
        return self.values[field][0] if field in self.values else default

    def ignore(self, key: str, reason: str) -> None:
        """A key that has no effect on the estimate (logging, paths, seeds, data files)."""
        self.ignored.append(f"{key}: {reason}")

    def unmodelled(self, key: str, reason: str) -> None:
        """A key fmest does not model although it may change memory, time or cost (GaLore,
        DoRA, a reference model, ...): the answer is given without it and every output format
        warns, naming the key and what is assumed instead."""
        self.not_modelled.append(f"{key}: {reason}")

    def not_training(self, key: str, kind: str, detail: str = "") -> InputError:
        """The refusal of a recipe that is not a training run (``kind`` one of
        :data:`NOT_TRAINING`): one line naming the key that says so. Generation and serving
        recipes are answered as inference instead (``sink.set("mode", "inference", key)``)."""
        more = f" ({detail})" if detail else ""
        article = "an" if kind[:1] in "aeiou" else "a"
        return NotTrainingError(f"{self.name}: {key}",
                          f"{article} {kind} recipe, not training{more}: fmest estimates training runs "
                          "and serving memory (--mode inference)",
                          accepted=("training", "generation/serving (--mode inference)"))

    def auto(self, field: str, key: str) -> None:
        self.autos.setdefault(field, []).append(key)

    def error(self, key: str, message: str, *, value: Any = None,
              accepted: Iterable[Any] | None = None) -> InputError:
        return InputError(f"{self.name}: {key}", message, value=value, accepted=accepted)

    def include(self, key: str, value: Any, fmt: str) -> None:
        """Load the file ``value`` names too (relative to this file, then to the working
        directory); report the key when there is no such file."""
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, "expected the path of a config file", value=value)
        value = value.strip()
        here = os.path.join(self.dir, value)
        for cand, display in ((here, os.path.normpath(os.path.join(os.path.dirname(self.name),
                                                                   value))),
                              (value, value)):
            if os.path.isfile(cand):
                self.includes.append((cand, display, fmt))
                self.ignore(key, f"names {display}, read as a {fmt} config right after this "
                            "file (config.files)")
                return
        self.ignore(key, f"{fmt} config {value!r} not found next to the file or in the working "
                    "directory; pass it with --config to map it")

    # -- coercion -------------------------------------------------------------------------
    def int_(self, key: str, value: Any, *, minimum: int = 1) -> int:
        ok = not isinstance(value, bool)
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                ok = False
        if ok and isinstance(value, float) and value.is_integer():
            value = int(value)
        if not ok or not isinstance(value, int) or value < minimum:
            raise self.error(key, f"expected a whole number >= {minimum}", value=value)
        return value

    def num(self, key: str, value: Any) -> float:
        try:
            if isinstance(value, bool):
                raise ValueError
            out = float(value)
        except (TypeError, ValueError):
            raise self.error(key, "expected a number", value=value) from None
        if out <= 0:
            raise self.error(key, "expected a number > 0", value=value)
        return out

    def bool_(self, key: str, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1"):
            return True
        if isinstance(value, str) and value.strip().lower() in ("false", "no", "off", "0", ""):
            return False
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise self.error(key, "expected a boolean", value=value, accepted=("true", "false"))

    def choice(self, key: str, value: Any, table: dict) -> Any:
        """``table[value]`` with a case-insensitive string key; an error lists the keys."""
        k = value.strip().lower() if isinstance(value, str) else value
        lowered = {(t.lower() if isinstance(t, str) else t): v for t, v in table.items()}
        if isinstance(k, bool) or not isinstance(k, (str, int, float)) or k not in lowered:
            raise self.error(key, "not an accepted value", value=value, accepted=list(table))
        return lowered[k]

    def mapping(self, key: str, value: Any) -> dict:
        if not isinstance(value, dict):
            raise self.error(key, "expected a mapping of keys", value=value)
        return value


def section(doc: dict, name: str) -> dict:
    """``doc[name]`` when it is a table, else an empty one: for a look-ahead at another
    section; the key walk reports a section that is not a table."""
    value = doc.get(name)
    return value if isinstance(value, dict) else {}


def model_name(value: Any) -> str:
    """A model as the tools name it: a Hub id or local path stays as given (the engine resolves
    presets by full name, short name and alias)."""
    return str(value).strip()


def set_modules_to_save(sink: "Sink", key: str, value: Any) -> None:
    """PEFT ``modules_to_save`` (axolotl/TRL ``lora_modules_to_save``, ms-swift
    ``modules_to_save``): the embedding and head names fmest prices go to
    ``training.lora_modules_to_save`` (fmest.job.MODULES_TO_SAVE); any other module trained in
    full is reported as not modelled, never dropped."""
    from fmest.job import module_to_save_name

    names = target_list(value) if value else []
    if not names:
        sink.ignore(key, "empty: no module trained in full")
        return
    known = [n for n in names if module_to_save_name(n)]
    other = [n for n in names if n not in known]
    if known:
        sink.set("training.lora_modules_to_save", known, key)
    if other:
        sink.unmodelled(key, f"{', '.join(other)} trained in full beside the adapters is not "
                        "counted (fmest prices the embedding and the head)")


def target_list(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [t.strip().strip("'\"") for t in str(value).strip("[] ").split(",") if t.strip()]
