"""The one input door: every source of a job is a reader returning a :class:`Layer`; one function
merges the layers and builds each :class:`fmest.job.Job` once.

Readers (each returns layers of ``field path -> (value, origin)`` plus the keys it ignored and
the values it could not resolve):

* :func:`read_document` -- a parsed document: fmest's own job layout, or an fm-training-estimator
  ``EstimateInput`` (one layer per ``job_configs`` entry); used by ``-f``, by an EstimateInput
  given with ``--config`` and by the Python API alike;
* :func:`read_configs` -- training tools' config files (:func:`fmest.configs.load_configs`);
* the flag table's reader (:func:`fmest.flags.read_flags`).

Merge order (later wins): the job input (``-f`` / the API / an EstimateInput), then config files
in the order given, then command-line flags. :func:`build_jobs` structures each merged job once
with the private cattrs converter (:mod:`fmest.convert`); a bad value names the field and the
source it came from. A dataset file that sizes the run (``workload.dataset_path``) is counted
then, once (:func:`fmest.datasets.resolve_dataset`), so no estimate reads a file. Every job
carries an :class:`InputReport` (origins, ignored keys, unresolved values, the number of jobs
the input held) that rides on its report, so every door reports the same.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional, Sequence

from attrs import field, frozen

from fmest.bounds import check_job
from fmest.convert import SECTIONS, job_from_dict, job_to_dict
from fmest.errors import InputError
from fmest.job import Job


@frozen(kw_only=True)
class Ignored:
    """A key of a source that sets nothing, and why."""

    source: str
    key: str
    reason: str
    #: ``config`` for keys of training-tool config files, ``input`` for the job input,
    #: ``flag`` for command-line flags fmest accepts but does not use (other tools' flags)
    kind: str = "input"
    #: ``none``: the key has no effect on the estimate (logging, paths, seeds); ``unmodelled``:
    #: fmest does not model it although it may change memory, time or cost (always warned)
    effect: str = "none"

    def __str__(self) -> str:
        return f"{self.source}: {self.key}: {self.reason}" if self.source else \
            f"{self.key}: {self.reason}"


@frozen(kw_only=True)
class Layer:
    """What one source says about one job.

    ``values``: job field path (``training.seq_len``, ``model``) -> ``(value, origin)``, the
    origin naming the source and key (``"ds.json: train_micro_batch_size_per_gpu"``).
    ``ignored``: keys that set nothing. ``unresolved``: field path -> why its value is open
    (DeepSpeed ``"auto"``; a global batch no GPU count splits, under its ``"file: key"``); a
    later layer that sets the field resolves it. ``batch_rules``: ``(total, "file: key")`` of
    the global-batch keys, solved once every layer is merged (:func:`build_job`). ``files``:
    ``(file, format)`` of config files read. ``name_errors``: whether an error in a value should
    name the origin (sources whose keys are not fmest's own field paths).
    """

    source: str
    values: dict = field(factory=dict)
    ignored: tuple = ()
    unresolved: dict = field(factory=dict)
    files: tuple = ()
    name_errors: bool = True
    batch_rules: tuple = ()


@frozen(kw_only=True)
class InputReport:
    """Where a job's values came from: ``origins`` (field path -> origin), every ``ignored``
    key of every source (:class:`Ignored`), the ``unresolved`` values left at fmest's default,
    the config ``files`` read, and this job's place among the jobs of the input
    (``job_index`` of ``job_count``)."""

    sources: tuple = ()
    origins: dict = field(factory=dict)
    ignored: tuple = ()
    unresolved: dict = field(factory=dict)
    files: tuple = ()
    job_index: int = 0
    job_count: int = 1
    #: what fmest assumed about the layout because no source said it ("layout: ..." warnings)
    assumed: tuple = ()

    def warnings(self) -> tuple[str, ...]:
        """The report's warning lines (the same through every door)."""
        lines = [f"{'flag' if i.kind == 'flag' else 'config key'} not modelled (may change "
                 f"the answer): {i}" for i in self.ignored if i.effect == "unmodelled"]
        lines += [f"{'config key' if i.kind == 'config' else 'input field'} ignored: {i}"
                  for i in self.ignored if i.effect != "unmodelled"]
        lines += [f"config value unresolved: {m}" for m in self.unresolved.values()]
        lines += [f"layout: {m}" for m in self.assumed]
        return tuple(lines)

    def to_dict(self) -> dict:
        return {"sources": list(self.sources), "origins": dict(self.origins),
                "ignored": [str(i) for i in self.ignored],
                "not_modelled": [str(i) for i in self.ignored if i.effect == "unmodelled"],
                "unresolved": list(self.unresolved.values()),
                "files": [list(f) for f in self.files],
                "assumed": list(self.assumed),
                "job_index": self.job_index, "job_count": self.job_count}


# -- readers ------------------------------------------------------------------------------
def _flatten(data: dict, source: str) -> dict:
    values: dict = {}
    for key, value in data.items():
        if key in SECTIONS and isinstance(value, dict):
            for name, item in value.items():
                values[f"{key}.{name}"] = (item, f"{source}: {key}.{name}")
        else:
            values[key] = (value, f"{source}: {key}")
    return values


def read_job_dict(data: dict, source: str = "input") -> Layer:
    """fmest's own layout (``{"model": ..., "training": {...}, ...}``) as a layer. Unknown
    keys stay in the layer: building the job reports them with the accepted names."""
    if not isinstance(data, dict):
        raise InputError(source, "expected a JSON object", value=type(data).__name__)
    return Layer(source=source, values=_flatten(data, source), name_errors=False)


def read_estimate_input(data: dict, source: str = "input") -> list[Layer]:
    """An fm-training-estimator ``EstimateInput``: one layer per ``job_configs`` entry; the
    ignored keys of the whole document are on every layer."""
    from fmest.compat.fm_training_estimator.reader import DEFAULTS_KEY, estimate_input_jobs

    try:
        jobs, ignored = estimate_input_jobs(data)
    except InputError as exc:
        if source == "input":
            raise
        raise exc.at(f"{source}: {exc.field}") from None
    entries = tuple(Ignored(source=source, key=key, reason=reason)
                    for key, reason in (e.split(": ", 1) for e in ignored))
    layers = []
    for i, job in enumerate(jobs):
        values = {}
        defaults = job.pop(DEFAULTS_KEY, {})
        for path, (value, _origin) in _flatten(job, source).items():
            values[path] = (value, defaults.get(path, f"{source}: job_configs[{i}]"))
        layers.append(Layer(source=source, values=values, ignored=entries))
    return layers


def read_document(data: Any, source: str = "input") -> list[Layer]:
    """A parsed document (dict), a JSON text or a :class:`Job`: the layers of its jobs."""
    from fmest.compat.fm_training_estimator import is_estimate_input

    if isinstance(data, Job):
        return [Layer(source=source, values=_flatten(job_to_dict(data), source),
                      name_errors=False)]
    if isinstance(data, bytes):
        try:
            data = data.decode()
        except UnicodeDecodeError as exc:
            raise InputError(source, f"not UTF-8 text (byte {exc.start})") from None
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise InputError(source, f"malformed JSON at line {exc.lineno} column "
                             f"{exc.colno}: {exc.msg}") from None
        except RecursionError:
            raise InputError(source, "JSON nested too deeply") from None
    if is_estimate_input(data):
        return read_estimate_input(data, source)
    return [read_job_dict(data, source)]


def read_file(path: str, flag: str = "--input-file") -> list[Layer]:
    """A job JSON file (``-f``): fmest's layout or an EstimateInput; ``-`` reads stdin."""
    try:
        if path == "-":
            import sys

            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    except OSError as exc:
        raise InputError(flag, f"cannot read: {exc.strerror}", value=path) from None
    except UnicodeDecodeError as exc:
        raise InputError(flag, f"not UTF-8 text (byte {exc.start})", value=path) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(flag, f"malformed JSON at line {exc.lineno} column {exc.colno}: "
                         f"{exc.msg}", value=path) from None
    except RecursionError:
        raise InputError(flag, "JSON nested too deeply", value=path) from None
    if not isinstance(data, dict):
        raise InputError(flag, "expected a JSON object", value=path)
    return read_document(data, source=path)


def _is_estimate_input_file(path: str, force_format: Optional[str]) -> bool:
    if force_format is not None:
        return force_format == "fm-training-estimator"
    from fmest.configs import detect_from_doc, parse_text

    try:
        with open(path, encoding="utf-8") as fh:
            doc = parse_text(path, fh.read())
    except (OSError, InputError, UnicodeDecodeError, RecursionError):
        return False  # load_configs reports it with the file's name
    return detect_from_doc(path, doc) == "fm-training-estimator"


def read_configs(paths: Sequence[str], force_format: Optional[str] = None
                 ) -> tuple[list[Layer], list[Layer]]:
    """``--config`` files: ``(job layers, config layers)``. An EstimateInput file is a job
    input (its layers, one per job, as if given with ``-f``); the other files merge into one
    layer by :func:`fmest.configs.load_configs` (later files win, included files follow the
    file naming them, DeepSpeed batch arithmetic and ``"auto"`` values)."""
    jobs: list[Layer] = []
    tools: list[str] = []
    for path in paths:
        if _is_estimate_input_file(path, force_format):
            if jobs:
                raise InputError("--config", "give one fm-training-estimator EstimateInput "
                                 "(it may hold several jobs)", value=path)
            jobs = read_file(path, flag="--config")
        else:
            tools.append(path)
    if not tools:
        return jobs, []
    from fmest.configs import load_configs

    merge = load_configs(tools, force_format)
    values = {}
    for path, origin in merge.origins.items():
        section, _, name = path.partition(".")
        value = merge.data.get(section) if not name else (merge.data.get(section) or {}).get(name)
        values[path] = (value, origin)
    ignored = tuple(Ignored(source="", key=key, reason=reason, kind="config", effect=effect)
                    for entries, effect in ((merge.not_modelled, "unmodelled"),
                                            (merge.ignored, "none"))
                    for key, reason in (e.split(": ", 1) if ": " in e else (e, "")
                                        for e in entries))
    return jobs, [Layer(source="config", values=values, ignored=ignored,
                        unresolved=dict(merge.unresolved), files=tuple(merge.files),
                        batch_rules=tuple(merge.batch_rules))]


# -- merging and building -----------------------------------------------------------------------
def _nest(values: dict) -> dict:
    data: dict = {}
    for path, (value, _origin) in values.items():
        section, _, name = path.partition(".")
        if name and section in SECTIONS:
            data.setdefault(section, {})[name] = value
        elif not name:
            data[path] = value
        else:  # an unknown section with a field: reported by the converter
            data.setdefault(section, {})[name] = value
    return data


def _solve_batches(layers: Sequence[Layer], values: dict) -> tuple[set, dict]:
    """Solve every layer's global-batch rules (:func:`fmest.configs.solve_train_batch`) with
    the merged ``values``, so a GPU count given by flags or another source splits a config
    file's global batch: the factor a rule derived is open again (a flag may have changed
    the others) and is written back into ``values``. Returns ``(the rules' keys, the
    unresolved messages of rules no GPU count splits)``."""
    if not any(layer.batch_rules for layer in layers):
        return set(), {}
    from fmest.configs import data_parallel, solve_train_batch, unsplit_reason

    keys: set = set()
    still_open: dict = {}
    for layer in layers:
        for total, where in layer.batch_rules:
            keys.add(where)
            derived = {p for p, (_v, o) in values.items()
                       if isinstance(o, str) and o.startswith(f"{where} / (")}

            def get(path: str, derived=derived) -> Any:
                return None if path in derived else values.get(path, (None, ""))[0]

            def origin(path: str, derived=derived) -> str:
                return "" if path in derived else str(values.get(path, (None, ""))[1])

            solved = solve_train_batch(total, where, get, origin)
            if solved is not None:
                target, value, how = solved
                values.pop(target, None)
                values[target] = (value, how)
            elif not data_parallel(get, origin)[2]:
                still_open[where] = unsplit_reason(total, where)
    return keys, still_open


def _named(exc: InputError, values: dict, named: dict) -> InputError:
    """``exc`` named by the source key its field came from, for sources with their own key
    names (``"ds.json: train_micro_batch_size_per_gpu (-> training.micro_batch_size)"``)."""
    hit = values.get(exc.field)
    if hit is None or not named.get(exc.field):
        return exc
    return exc.at(f"{hit[1]} (-> {exc.field})")


def build_job(layers: Sequence[Layer], *, job_index: int = 0, job_count: int = 1,
              require_model: Optional[InputError] = None,
              count_dataset: bool = True) -> tuple[Job, InputReport]:
    """Merge ``layers`` (later wins) and structure the job once. A bad value raises
    :class:`InputError` naming the field and, for sources with their own key names, the origin.
    ``require_model`` is raised when no layer names the model (the CLI names its flag).

    A ``workload.dataset_path`` that sizes the run is counted here, once
    (:func:`fmest.datasets.resolve_dataset`), into ``workload.dataset_tokens``, whose origin
    names the file and how it was counted; doors that do not estimate (``fmest export``,
    ``fmest probe``'s job) pass ``count_dataset=False`` and never read the file."""
    values: dict = {}
    named: dict = {}
    for layer in layers:
        for path, (value, origin) in layer.values.items():
            values.pop(path, None)
            values[path] = (value, origin)
            named[path] = layer.name_errors
    if "model" not in values and require_model is not None:
        raise require_model
    rule_keys, batch_open = _solve_batches(layers, values)
    for path in values:
        named.setdefault(path, True)  # a factor a config file's global batch derived
    try:
        job = job_from_dict(_nest(values))
        # the documented bounds and conflict rules, here so a refusal names the source key
        check_job(job)
    except InputError as exc:
        raise _named(exc, values, named) from None
    unread: tuple = ()
    if job.workload.dataset_path and job.mode == "training":
        from fmest.datasets import needs_counting

        if not needs_counting(job.workload):   # sized by max_steps / tokens / samples instead
            unread = (Ignored(source="", key="workload.dataset_path", reason=(
                "not read: workload.max_steps, dataset_tokens or num_samples sizes the run "
                "and takes precedence")),)
    if count_dataset and job.workload.dataset_path:
        # read once, here: no estimate hook reads a file (errors name workload.dataset_path)
        from fmest.datasets import resolve_dataset

        job, counted = resolve_dataset(job)
        if counted is not None:
            values["workload.dataset_tokens"] = (job.workload.dataset_tokens, counted)
            named["workload.dataset_tokens"] = True
            try:
                check_job(job)   # dataset_tokens has a bound
            except InputError as exc:
                raise _named(exc, values, named) from None
    unresolved = {}
    for i, layer in enumerate(layers):
        later = {p for lay in layers[i + 1:] for p in lay.values}
        unresolved.update({p: m for p, m in layer.unresolved.items()
                           if p not in later and p not in rule_keys})
    unresolved.update(batch_open)
    files = tuple(f for layer in layers for f in layer.files)
    report = InputReport(
        sources=tuple(dict.fromkeys(layer.source for layer in layers)),
        origins={p: o for p, (_v, o) in sorted(values.items())},
        ignored=tuple(dict.fromkeys([*(i for layer in layers for i in layer.ignored),
                                     *unread])),
        unresolved=unresolved,
        files=files, assumed=layout_assumptions(job, values, bool(files)),
        job_index=job_index, job_count=job_count)
    return job, report


def layout_assumptions(job: Job, values: dict, from_files: bool) -> tuple[str, ...]:
    """What the answer assumes about the GPU layout because no source says it (issue 23: the
    layout is never guessed silently): with config files and no GPU count from any file or
    flag, the GPUs fmest takes (the model-parallel size, data-parallel 1, or the default node);
    and a sharded strategy (ZeRO, FSDP) on one GPU, where it shards nothing."""
    if job.mode != "training":
        return ()
    from fmest.job import resolve_layout

    try:
        layout = resolve_layout(job)
    except InputError:
        return ()   # the estimate refuses the layout itself, naming the field
    world = layout.world_size
    out = []
    if from_files and not {"hardware.gpus_per_node", "parallelism.dp"} & set(values):
        out.append(f"no config file or flag gives the GPU count: {world} GPU"
                   f"{'s' if world > 1 else ''} assumed"
                   + (" (the fewest the parallel degrees allow: tp x pp x cp, with data-"
                      "parallel a multiple of ep)" if world > 1 else "")
                   + "; give --gpus-per-node / --nodes (or the launcher's --nproc_per_node / "
                   "--nnodes with the file) for the real layout")
    par = job.parallelism
    sharded = [s for s, on in ((f"ZeRO-{par.zero_stage}", par.zero_stage > 0),
                               (f"FSDP {par.fsdp}", par.fsdp not in ("none", "no_shard")))
               if on]
    if sharded and world == 1:
        out.append(f"{' and '.join(sharded)} on 1 GPU shards nothing across GPUs (only CPU "
                   "offload, if set, moves memory); give the GPU count the run uses")
    return tuple(out)


def build_jobs(job_layers: Sequence[Layer], over: Sequence[Layer] = (), *,
               require_model: Optional[InputError] = None,
               count_dataset: bool = True) -> list[tuple[Job, InputReport]]:
    """One job per job layer (at least one), each merged with the ``over`` layers (config
    files, then flags) in that order. The ignored keys of every job's input are reported on
    every job. ``count_dataset``: see :func:`build_job`."""
    job_layers = list(job_layers) or [Layer(source="input", name_errors=False)]
    count = len(job_layers)
    every = tuple(dict.fromkeys(i for layer in job_layers for i in layer.ignored))
    out = []
    for index, layer in enumerate(job_layers):
        if every:
            layer = Layer(source=layer.source, values=layer.values, ignored=every,
                          unresolved=layer.unresolved, files=layer.files,
                          name_errors=layer.name_errors, batch_rules=layer.batch_rules)
        out.append(build_job([layer, *over], job_index=index, job_count=count,
                             require_model=require_model, count_dataset=count_dataset))
    return out


def read_input(data: Any, source: str = "input", *,
               count_dataset: bool = True) -> list[tuple[Job, InputReport]]:
    """The Python API's door: a job, dict, JSON text or EstimateInput -> jobs with reports
    (``count_dataset``: see :func:`build_job`)."""
    if isinstance(data, (str, os.PathLike)) and not str(data).lstrip().startswith("{") \
            and os.path.isfile(str(data)):
        return build_jobs(read_file(str(data), flag="job"), count_dataset=count_dataset)
    return build_jobs(read_document(data, source), count_dataset=count_dataset)


__all__ = ["Ignored", "InputReport", "Layer", "build_job", "build_jobs", "read_configs",
           "read_document", "read_estimate_input", "read_file", "read_input", "read_job_dict"]
