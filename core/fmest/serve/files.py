"""Which files on the server's disk a request may make ``fmest serve`` read.

The CLI reads whatever its user names: the user owns the disk. The service answers whoever can
reach it, so it reads no path a request names unless its operator started it with
``fmest serve --allow-path DIR`` (repeatable; ``create_app(allow_paths=...)``), and then only
paths whose real path (``~`` expanded, relative to the server's working directory, symlinks
resolved) is an existing file or folder under one of those directories. Every refusal is one
fixed message per field (:data:`FILE_FIELDS`): the same whether the path exists or not, and with
no allow-list the path is never looked at.

A request's jobs are read through the CLI's door without counting datasets
(:func:`fmest.api.read_jobs` with ``count_dataset=False``), whatever source set them (a flag,
the job, an EstimateInput's ``fm.base_model_path`` or ``data.dataset``); each job's fields of
:data:`FILE_FIELDS` are checked; only then are datasets counted (:meth:`FileAccess.read_jobs`).
"""

from __future__ import annotations

import os
import re
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence

import attrs
from attrs import frozen

from fmest.errors import FmestError, InputError
from fmest.serve.inputs import INPUT_SOURCE, args_from_body

if TYPE_CHECKING:
    from fmest.engine import Registries
    from fmest.flags import Flag
    from fmest.inputs import InputReport, Layer
    from fmest.job import Job

#: The entry-point group that names installed learned-model bundles (docs/learned.md); a
#: ``learned_model`` that is one of these names names no path.
LEARNED_MODELS_GROUP = "fmest.learned_models"
#: A model name the resolver may stat as a relative path (an alias of a preset) is taken only
#: in the shape of a name or a Hub id: no leading ``/``, ``.`` or ``~``, at most one ``/``.
_NAME = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?$")


@frozen(kw_only=True)
class AllowList:
    """The directories (real paths) under which a request may name files; empty: none."""

    dirs: tuple[str, ...] = ()

    @classmethod
    def of(cls, paths: Iterable[str | os.PathLike]) -> "AllowList":
        """The allow-list of ``--allow-path`` values; each must be an existing directory (the
        operator's input, checked at start-up)."""
        dirs = []
        for given in paths:
            real = os.path.realpath(os.path.expanduser(os.fspath(given)))
            if not os.path.isdir(real):
                raise FmestError(f"--allow-path {os.fspath(given)}: not a directory")
            dirs.append(real)
        return cls(dirs=tuple(dict.fromkeys(dirs)))

    def permits(self, path: str) -> bool:
        """Whether ``path``, as a reader opens it, is an existing file or folder whose real
        path lies under an allowed directory. Looks at nothing when no directory is allowed."""
        if not self.dirs or not path:
            return False
        try:
            real = Path(os.path.realpath(os.path.expanduser(path)))
            return any(real.is_relative_to(d) for d in self.dirs) and real.exists()
        except (OSError, ValueError):  # a NUL byte, a name too long
            return False


@frozen(kw_only=True)
class Known:
    """What a request may name without naming a file: the model registry (presets and their
    aliases) and the installed learned-model bundle names."""

    registries: "Registries"
    learned_models: frozenset[str]

    def is_model(self, name: str) -> bool:
        """Whether the model resolver answers ``name`` from the registry, without a path
        (:func:`fmest.models.local.resolve_model`: a preset, another owner's copy of one, an
        alias of one)."""
        from fmest.models.aliases import alias_loader

        presets = self.registries.models
        s = name.strip()
        if presets.find(s) is not None or ("/" in s and presets.find(s.split("/")[-1])):
            return True
        # the resolver stats an alias as a relative path before the alias table: a name shape
        return bool(_NAME.match(s)) and ".." not in s.split("/") \
            and alias_loader(s, presets) is not None


def installed_learned_models() -> frozenset[str]:
    """The names of :data:`LEARNED_MODELS_GROUP` (installed metadata; no request path)."""
    return frozenset(ep.name for ep in importlib_metadata.entry_points(group=LEARNED_MODELS_GROUP))


@frozen(kw_only=True)
class FileField:
    """A job field whose value may name a file the service would read."""

    #: the job field
    path: str
    #: the key an fm-training-estimator ``job_configs`` entry sets it with, if any
    estimate_input_key: Optional[str]
    #: what the service would read (for docs/serve.md)
    reads: str
    #: the one refusal text, whatever the path and whether it exists
    message: str
    #: ``(job, known) -> the path the value names``, or None when it names no file
    named: Callable[["Job", Known], Optional[str]]
    #: ``known -> the accepted names`` shown with the refusal
    accepted: Callable[[Known], Sequence[str]] = lambda known: ()


def _model_path(job: "Job", known: Known) -> Optional[str]:
    if job.model_config is not None:  # the config is inline; the name is a label
        return None
    return None if known.is_model(job.model) else job.model


_ALLOW = "a file or folder this server lets requests read (fmest serve --allow-path)"

#: The job fields that may name a file, each with what reading it reads and its refusal.
FILE_FIELDS: tuple[FileField, ...] = (
    FileField(path="model", estimate_input_key="fm.base_model_path",
              reads="a config.json, or a model folder holding one",
              message=f"not a registered model (GET /v1/models) nor {_ALLOW}; send the "
                      "model's config.json inline as model_config",
              named=_model_path),
    FileField(path="workload.dataset_path", estimate_input_key="data.dataset",
              reads="the dataset file, read whole to count its tokens",
              message=f"not {_ALLOW}; give the dataset's size as dataset_tokens or num_samples",
              named=lambda job, known: job.workload.dataset_path or None),
    FileField(path="options.learned_model", estimate_input_key=None,
              reads="a learned-model bundle directory (metadata.json and its model files)",
              message=f"not an installed learned model nor {_ALLOW}",
              named=lambda job, known: (None if not job.options.learned_model
                                        or job.options.learned_model in known.learned_models
                                        else job.options.learned_model),
              accepted=lambda known: sorted(known.learned_models)),
)

_JOB_CONFIG = re.compile(r"^job_configs\[\d+\]$")


def _field(row: FileField, origin: Optional[str]) -> str:
    """The request's name for the field: the flag (``--dataset``, shown as ``dataset``), the
    job field, or the EstimateInput key (``job_configs[0].data.dataset``)."""
    if not origin:
        return row.path
    if origin.startswith("--"):
        return origin
    key = origin.removeprefix(f"{INPUT_SOURCE}: ")
    if _JOB_CONFIG.match(key):
        return f"{key}.{row.estimate_input_key}" if row.estimate_input_key else key
    return key if key != origin else row.path


@frozen(kw_only=True)
class FileAccess:
    """The service's file policy: an :class:`AllowList` and the installed bundle names."""

    allow: AllowList = AllowList()
    learned_models: frozenset[str] = frozenset()

    @classmethod
    def of(cls, allow_paths: Iterable[str | os.PathLike] = ()) -> "FileAccess":
        return cls(allow=AllowList.of(allow_paths), learned_models=installed_learned_models())

    def permits_model(self, path: str) -> bool:
        """A model path: the file, and for a folder the ``config.json`` the resolver reads."""
        if not self.allow.permits(path):
            return False
        folder = Path(os.path.expanduser(path))
        return not folder.is_dir() or self.allow.permits(str(folder / "config.json"))

    def _tokenizer_permitted(self, model: str) -> bool:
        """Whether the tokenizer the dataset counter looks for beside ``model``
        (:func:`fmest.datasets.local_tokenizer`: in the folder, or next to the file) is
        permitted."""
        if model.startswith("~") or not self.allow.permits(model):
            return False  # the counter does not expand ~
        p = Path(model)
        return self.allow.permits(str((p if p.is_dir() else p.parent) / "tokenizer.json"))

    def check(self, pairs: Sequence[tuple["Job", "InputReport"]],
              registries: "Registries") -> None:
        """Raise the field's one refusal for the first file a job names that the allow-list
        does not permit."""
        known = Known(registries=registries, learned_models=self.learned_models)
        for job, report in pairs:
            for row in FILE_FIELDS:
                path = row.named(job, known)
                if path is None:
                    continue
                permitted = self.permits_model(path) if row.path == "model" \
                    else self.allow.permits(path)
                if not permitted:
                    raise InputError(_field(row, report.origins.get(row.path)), row.message,
                                     accepted=row.accepted(known))

    def read_jobs(self, given: Any, *, job_layers: Optional[Sequence["Layer"]],
                  registries: "Registries") -> list[tuple["Job", "InputReport"]]:
        """:func:`fmest.api.read_jobs` for a request: read without counting, check every
        file, then count the datasets (now all permitted)."""
        from fmest import api

        pairs = api.read_jobs(given, job_layers=job_layers, count_dataset=False)
        self.check(pairs, registries)
        return [self._counted(job, report) for job, report in pairs]

    def _counted(self, job: "Job", report: "InputReport") -> tuple["Job", "InputReport"]:
        """The door's dataset count (:func:`fmest.datasets.resolve_dataset`), except that the
        tokenizer beside the model is looked for only when the model is a permitted path (a
        preset name or an inline config's label would be looked up anywhere on the disk)."""
        if not job.workload.dataset_path:
            return job, report
        from fmest.bounds import check_job
        from fmest.datasets import resolve_dataset

        probe = job if self._tokenizer_permitted(job.model) else job.evolve(model="")
        counted, origin = resolve_dataset(probe, progress=False)
        if origin is None:
            return job, report
        job = job.evolve(workload={"dataset_tokens": counted.workload.dataset_tokens})
        try:
            check_job(job)  # dataset_tokens has a bound
        except InputError as exc:
            if exc.field == "workload.dataset_tokens":
                raise exc.at(f"{origin} (-> {exc.field})") from None
            raise
        origins = dict(sorted({**report.origins, "workload.dataset_tokens": origin}.items()))
        return job, attrs.evolve(report, origins=origins)

    def check_body(self, flags: tuple["Flag", ...], body: Any,
                   registries: "Registries") -> None:
        """:meth:`check` for a body a command (``fmest plan``) reads itself."""
        from fmest import api
        from fmest.inputs import read_document

        args, job_input = args_from_body(flags, body)
        layers = read_document(job_input, source=INPUT_SOURCE) if job_input is not None else None
        self.check(api.read_jobs(args, job_layers=layers, count_dataset=False), registries)


def checked_plan_response(flags: tuple["Flag", ...], body: Any, service: Any,
                          access: FileAccess) -> str:
    """:func:`fmest.serve.plan.plan_response` once the body's files are checked."""
    from fmest.serve.plan import plan_response

    access.check_body(flags, body, service.engine.registries)
    return plan_response(flags, body, service)
