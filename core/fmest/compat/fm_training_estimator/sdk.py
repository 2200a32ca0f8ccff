"""The original's SDK (``fm_training_estimator/sdk/sdk.py`` @ 1d04f05): ``estimate_memory``,
``estimate_time``, ``estimate_tokens``, ``estimate_cost`` and ``estimate``, answered by fmest.

Each takes an ``EstimateInput`` (this package's dataclass, the original's own, a dict in its JSON
layout, JSON text or a file path) and the original's ``model_path``, and returns the original's
record (:mod:`.config.arguments`) with ``warnings``: every input fmest could not honour, every
default of the original it applied. As in the original, only ``job_configs[0]`` is estimated.

How an answer is made:

1. The input is read field by field (:func:`fmest.compat.fm_training_estimator.reader.
   estimate_input_jobs`) with the original's values for absent fields and its rules: FSDP
   ``full_shard`` when ``numGpusPerPod`` is not 1, the GPU count searched when it is 0
   (fmest's fewest-GPU search, :func:`fmest.searches.min_gpus`; no count fits: ``ValueError
   ("Input configuration is infeasible! ...")``, the original's message).
2. ``estimator_metadata.method`` ``learned`` or ``hybrid`` (the original's default) with a
   ``base_data_path`` or ``model_path``: memory and tokens/s come from that data first (an
   exact row, then a model trained on it: :mod:`.learned`), theory otherwise; ``theory``
   uses fmest's analytic estimate alone.
3. Time: ``train_time`` is the training steps over ``data.dataset`` (a local file, counted by
   :mod:`fmest.datasets`) for ``num_train_epochs``; ``time`` adds the original's allowances
   for loading the model and writing checkpoints (:data:`MODEL_LOAD_SECONDS`,
   :data:`CHECKPOINT_SECONDS`, its ``save_strategy`` rule).
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any, Optional

from attrs import frozen

from fmest.compat.fm_training_estimator.records import (
    CostEstimate,
    Estimate,
    MemoryEstimate,
    TimeEstimate,
    TokensEstimate,
    given_fields,
)
from fmest.compat.fm_training_estimator.utils import fmt_size, logger

#: fm_training_estimator/time/time.py @ 1d04f05: ``MODEL_LOAD_TIME = 5 * 60`` and
#: ``CHECKPOINT_TIME = 60`` seconds, which its ``time`` adds to the training time (one
#: checkpoint at the end plus those its ``save_strategy`` writes). They define what the
#: original calls ``time``; fmest's own time answers (``train_time``) do not use them.
MODEL_LOAD_SECONDS = 5 * 60
CHECKPOINT_SECONDS = 60

_BLOCKS = ("hf_training", "fm", "data", "infra", "peft_lora", "peft_qlora")
#: fmest memory parts -> the original's four (everything else is counted as activation
#: memory: the working set of the step that is not weights, gradients or optimizer state)
_MODEL_PARTS = ("weights", "lora_adapters")
_GRADIENT_PARTS = ("gradients",)
_OPTIMIZER_PARTS = ("optimizer_states", "master_weights", "optimizer_temporaries")


@functools.lru_cache(maxsize=1)
def _default_engine():
    from fmest.engine import default_engine

    return default_engine()


def _object_dict(obj: Any) -> dict:
    """An EstimateInput object (this package's or the original's dataclass) as the JSON layout,
    read attribute by attribute: nested transformers objects are never serialized."""
    from fmest.compat.fm_training_estimator.records import _plain

    configs = []
    for cfg in getattr(obj, "job_configs", None) or []:
        configs.append({name: given_fields(getattr(cfg, name)) for name in _BLOCKS
                        if getattr(cfg, name, None) is not None})
    out: dict[str, Any] = {"job_configs": configs}
    meta = getattr(obj, "estimator_metadata", None)
    if meta is not None:
        out["estimator_metadata"] = _plain(meta)
    return out


def input_dict(estimate_input: Any) -> tuple[dict, list[str]]:
    """``(the EstimateInput as its JSON layout, warnings)`` of any accepted form."""
    from fmest.errors import InputError

    warnings: list[str] = []
    if isinstance(estimate_input, dict):
        return estimate_input, warnings
    if hasattr(estimate_input, "job_configs"):
        unknown = getattr(estimate_input, "__dict__", {}).get("_unknown_keys", ())
        warnings += [f"{key}: not a field of fm-training-estimator's EstimateInput; not used"
                     for key in unknown]
        return _object_dict(estimate_input), warnings
    if isinstance(estimate_input, (str, bytes, os.PathLike)):
        text = estimate_input.decode() if isinstance(estimate_input, bytes) \
            else os.fspath(estimate_input)
        if not text.lstrip().startswith("{"):
            if not os.path.isfile(text):
                raise InputError("estimate_input", "neither JSON text nor a file", value=text)
            if text.endswith((".yaml", ".yml")):
                import yaml

                with open(text, encoding="utf-8") as fh:
                    data = yaml.safe_load(fh)
                if not isinstance(data, dict):
                    raise InputError(text, "expected a mapping at the top level")
                return data, warnings
            with open(text, encoding="utf-8") as fh:
                text = fh.read()
        try:
            return json.loads(text), warnings
        except json.JSONDecodeError as exc:
            raise InputError("estimate_input", f"not valid JSON ({exc.msg}, line "
                             f"{exc.lineno})") from None
    raise InputError("estimate_input", "expected an EstimateInput (the dataclass, a dict, JSON "
                     "text or a file path)", value=type(estimate_input).__name__)


@frozen
class Prepared:
    """An EstimateInput read for one estimate: the fmest job at its GPU count and what the
    answer needs beside it."""

    job: Any
    num_gpus: int
    query: dict
    method: str
    data_path: Optional[str]
    hf: dict
    records: Optional[int]
    warnings: tuple[str, ...]
    time_warnings: tuple[str, ...]


def _get(d: dict, *names: str, default: Any = None) -> Any:
    for n in names:
        if n in d and d[n] is not None:
            return d[n]
    return default


def prepare(estimate_input: Any, engine, *, count_dataset: bool = True) -> Prepared:
    """Read ``estimate_input`` as the original reads it and size its first job."""
    from fmest.compat.fm_training_estimator.reader import DEFAULTS_KEY, estimate_input_jobs
    from fmest.convert import job_from_dict

    data, warnings = input_dict(estimate_input)
    if not isinstance(data, dict):
        from fmest.errors import InputError

        raise InputError("EstimateInput", "expected a JSON object", value=type(data).__name__)
    configs = _get(data, "job_configs", "jobConfigs")
    if not configs:
        raise ValueError("Did not receive a training job config")
    if isinstance(configs, list) and len(configs) > 1:
        warnings.append(f"job_configs[1:]: {len(configs) - 1} more job(s) not estimated "
                        "(fm-training-estimator's SDK estimates the first; fmest estimate "
                        "--config FILE estimates every one)")
        data = {**data, "job_configs": configs[:1]}
    dicts, ignored = estimate_input_jobs(data)
    d = dicts[0]
    defaults = d.pop(DEFAULTS_KEY, {})
    d.get("options", {}).pop("method", None)
    # the original judges a GPU count by its point estimate (feasible when the estimate fits):
    # the drop-in's fewest-GPU search answers the same question, at P(fit) >= 0.5, not at
    # fmest's own default 0.9 (docs/compat.md)
    d.setdefault("options", {}).setdefault("fit_confidence", 0.5)
    warnings += [w for w in ignored if not w.startswith("estimator.base_data_path:")]
    warnings += list(dict.fromkeys(defaults.values()))   # dtype and precision share one
    meta = _get(data, "estimator_metadata", "estimatorMetadata", "estimator", default={})
    method = str(_get(meta, "method", default="hybrid")).lower()
    data_path = _get(meta, "base_data_path", "baseDataPath", "lookup_data_path")
    cfg = configs[0] if isinstance(configs, list) else {}
    from fmest.compat.fm_training_estimator.reader import _camel_to_snake

    blocks = {_camel_to_snake(k): v for k, v in cfg.items()} if isinstance(cfg, dict) else {}
    hf = blocks.get("hf_training") or {}
    fm = blocks.get("fm") or {}
    infra = blocks.get("infra") or {}
    job = job_from_dict(d)

    time_warnings: list[str] = []
    records = None
    if count_dataset and job.workload.dataset_path:
        from fmest.datasets import count_dataset_tokens
        from fmest.errors import InputError

        path = str(job.workload.dataset_path)
        try:
            counted = count_dataset_tokens(path, model_ref=job.model)
        except InputError as exc:
            time_warnings.append(
                f"data.dataset {path!r}: {exc.message}; time and cost are not estimated (fmest "
                "counts local JSON/JSONL/CSV/Parquet/text files; a Hugging Face dataset name "
                "needs the Hub)")
            job = job.evolve(workload={"dataset_path": None})
        else:
            records = counted.records
            job = job.evolve(workload={"dataset_tokens": float(counted.tokens)})
    elif count_dataset and job.workload.max_steps is None:
        time_warnings.append("data.dataset absent: time and cost need the dataset whose "
                             "tokens the run reads (a local file)")

    given = int(_get(infra, "numGpusPerPod", "num_gpus_per_pod", default=0) or 0)
    job, num_gpus = sized_job(job, given, engine)
    query = {"model_name": job.model if not fm else _get(fm, "base_model_path",
                                                         default=job.model),
             "number_gpus": num_gpus,
             "batch_size": job.training.micro_batch_size,
             "seq_len": job.training.seq_len,
             "gpu_model": _get(infra, "gpuModel", "gpu_model", default="A100"),
             "method": job.training.technique}
    return Prepared(job=job, num_gpus=num_gpus, query=query, method=method,
                    data_path=None if data_path is None else str(data_path), hf=hf,
                    records=records, warnings=tuple(warnings),
                    time_warnings=tuple(time_warnings))


def sized_job(job, given: int, engine) -> tuple[Any, int]:
    """(job to estimate, num_gpus): the job as given, or at its fewest fitting GPUs (the
    original's ``numGpusPerPod: 0``)."""
    if given > 0:
        from fmest.job import resolve_layout

        return job, resolve_layout(job).world_size
    from fmest.searches import min_gpus

    found = min_gpus(engine, job)
    if found.gpus is None:
        raise ValueError(f"Input configuration is infeasible! {found.reason}")
    return found.job, found.gpus


@frozen
class Learned:
    memory_bytes: Optional[float] = None
    tokens_per_second: Optional[float] = None
    memory_basis: str = ""
    tps_basis: str = ""
    warnings: tuple[str, ...] = ()


def learned(prep: Prepared, model_path: Optional[str], engine) -> Learned:
    """The answers of the user's data (``base_data_path``) and model (``model_path``)."""
    if prep.method == "theory":
        if prep.data_path or model_path:
            return Learned(warnings=("estimator_metadata.method is theory: base_data_path and "
                                     "model_path are not used",))
        return Learned()
    if not prep.data_path and not model_path:
        return Learned()
    from fmest.compat.fm_training_estimator.learned import learned_answer

    a = learned_answer(prep.query, prep.job, data_path=prep.data_path, model_path=model_path,
                       engine=engine)
    return Learned(memory_bytes=a.memory_bytes, tokens_per_second=a.tokens_per_second,
                   memory_basis=a.memory_basis, tps_basis=a.tps_basis,
                   warnings=tuple(a.warnings))


def memory_record(report, num_gpus: int, learned_: Learned = Learned(),
                  warnings: tuple[str, ...] = ()) -> MemoryEstimate:
    """The original's ``MemoryEstimate``: its four parts add up to the total (the peak
    phase's breakdown; see :class:`MemoryEstimate`)."""
    m = report.memory
    parts = {k: int(v) for k, v in (m.components if m is not None else {}).items()}
    total = float(m.total_bytes if m is not None else 0)
    notes = list(warnings)
    if learned_.memory_bytes is not None and total > 0:
        scale = learned_.memory_bytes / total
        parts = {k: int(round(v * scale)) for k, v in parts.items()}
        total = float(learned_.memory_bytes)
        if parts:  # the rounding's remainder goes to the largest part: they add up exactly
            largest = max(parts, key=lambda k: parts[k])
            parts[largest] += int(round(total)) - sum(parts.values())
        notes.append(f"total_mem_estimate from {learned_.memory_basis}; the parts are fmest's "
                     "breakdown of the peak scaled to it")
    model = sum(parts.get(k, 0) for k in _MODEL_PARTS)
    grad = sum(parts.get(k, 0) for k in _GRADIENT_PARTS)
    opt = sum(parts.get(k, 0) for k in _OPTIMIZER_PARTS)
    act = total - model - grad - opt
    return MemoryEstimate(total_mem_estimate=fmt_size(total), activation_memory=fmt_size(act),
                          gradient_memory=fmt_size(grad), model_memory=fmt_size(model),
                          optimizer_memory=fmt_size(opt), num_gpus=int(num_gpus),
                          phase=m.phase if m is not None else "", parts=parts,
                          warnings=notes + list(learned_.warnings))


def _tps(report, learned_: Learned) -> Optional[float]:
    if learned_.tokens_per_second is not None:
        return float(learned_.tokens_per_second)
    k = report.tokens
    return None if k is None else float(k.tokens_per_second)


def _checkpoints(prep: Prepared, report) -> tuple[float, list[str]]:
    """Checkpoints the run writes, by the original's rule (time/time.py): one at the end,
    plus one per epoch (``save_strategy: epoch``) or per ``save_steps`` steps."""
    hf = prep.hf
    strategy = str(_get(hf, "save_strategy", default="steps")).lower().split(".")[-1]
    epochs = float(prep.job.workload.epochs)
    if strategy == "epoch":
        return 1 + epochs, []
    if strategy == "steps":
        save_steps = float(_get(hf, "save_steps", default=500))
        t = report.time
        steps = t.total_steps if t is not None and t.total_steps else None
        if steps is None and prep.records is not None:
            steps = epochs * prep.records / max(1, prep.job.training.micro_batch_size
                                                * prep.num_gpus)
        if steps is None or save_steps <= 0:
            return 1.0, []
        per = save_steps if save_steps >= 1 else max(1.0, save_steps * steps)
        return 1 + steps / per, []
    if strategy == "best":
        return 1.0, ["hf_training.save_strategy best: the number of checkpoints cannot be "
                     "known; one is counted"]
    return 1.0, []


def time_record(prep: Prepared, report, learned_: Learned = Learned()) -> TimeEstimate:
    t = report.time
    warnings = list(prep.warnings) + list(prep.time_warnings) + list(learned_.warnings)
    train = None if t is None or t.total_seconds is None else float(t.total_seconds)
    if train is not None and learned_.tokens_per_second and report.tokens is not None:
        train *= float(report.tokens.tokens_per_second) / float(learned_.tokens_per_second)
        warnings.append(f"train_time from tokens/s of {learned_.tps_basis}")
    if train is None:
        return TimeEstimate(time=None, train_time=None, warnings=warnings)
    checkpoints, notes = _checkpoints(prep, report)
    total = train + MODEL_LOAD_SECONDS + checkpoints * CHECKPOINT_SECONDS
    return TimeEstimate(time=total, train_time=train, warnings=warnings + notes)


def tokens_record(prep: Prepared, report, learned_: Learned = Learned()) -> TokensEstimate:
    warnings = list(prep.warnings) + list(learned_.warnings)
    if learned_.tokens_per_second is not None:
        warnings.append(f"tps from {learned_.tps_basis}")
    return TokensEstimate(tps=_tps(report, learned_), warnings=warnings)


def cost_record(prep: Prepared, report) -> CostEstimate:
    c = report.cost
    warnings = list(prep.warnings) + list(prep.time_warnings)
    usd = None if c is None or c.usd is None else float(c.usd)
    if usd is None and not prep.time_warnings:
        warnings.append("no price applies to this GPU (fmest prices; a run length is needed)")
    return CostEstimate(usd=usd, warnings=warnings)


def _run(estimate_input: Any, model_path: Optional[str], engine, quantities: tuple[str, ...]):
    eng = engine if engine is not None else _default_engine()
    prep = prepare(estimate_input, eng, count_dataset="time" in quantities)
    report = eng.estimate(prep.job, quantities=quantities)
    got = learned(prep, model_path, eng)
    return prep, report, got


_MEMORY = ("memory",)
_ALL = ("memory", "time", "tokens", "cost")


def estimate_memory(estimate_input: Any, model_path: Optional[str] = None, *,
                    engine=None) -> MemoryEstimate:
    """Per-GPU peak memory and ``num_gpus`` (the given count, or the fewest that fit)."""
    prep, report, got = _run(estimate_input, model_path, engine, _MEMORY)
    return memory_record(report, prep.num_gpus, got, prep.warnings)


def estimate_time(estimate_input: Any, model_path: Optional[str] = None, *,
                  engine=None) -> TimeEstimate:
    """Seconds: ``time`` (the whole job) and ``train_time`` (the training steps)."""
    prep, report, got = _run(estimate_input, model_path, engine, _ALL[:3])
    return time_record(prep, report, got)


def estimate_tokens(estimate_input: Any, model_path: Optional[str] = None, *,
                    engine=None) -> TokensEstimate:
    """Tokens per second of the whole job."""
    prep, report, got = _run(estimate_input, model_path, engine, ("memory", "time", "tokens"))
    return tokens_record(prep, report, got)


def estimate_cost(estimate_input: Any, model_path: Optional[str] = None, *,
                  engine=None) -> CostEstimate:
    """Dollars for the run on rented instances (the original raises NotImplementedError)."""
    prep, report, got = _run(estimate_input, model_path, engine, _ALL)
    return cost_record(prep, report)


def estimate(estimate_input: Any, model_path: Optional[str] = None, *,
             engine=None) -> Estimate:
    """Memory, time, tokens and cost of one job together."""
    prep, report, got = _run(estimate_input, model_path, engine, _ALL)
    return Estimate(memory=memory_record(report, prep.num_gpus, got, prep.warnings),
                    time=time_record(prep, report, got),
                    tokens=tokens_record(prep, report, got),
                    cost=cost_record(prep, report))


def adr_output(job, engine) -> dict:
    """What ``fmest estimate ... --format fm-training-estimator`` prints for ``job`` (the first
    job the command line describes): the original's ``Estimate`` as JSON. A job that names no
    GPU count is estimated at its fewest fitting GPUs, which ``num_gpus`` reports."""
    import dataclasses

    given = 0
    if job.hardware.gpus_per_node is not None or job.parallelism.dp is not None:
        from fmest.job import resolve_layout

        given = resolve_layout(job).world_size
    job, num_gpus = sized_job(job, given, engine)
    report = engine.estimate(job)
    # the report's warnings say what it does not know (a --params model: no activations,
    # no time), so the records carry them
    prep = Prepared(job=job, num_gpus=num_gpus, query={}, method="theory", data_path=None,
                    hf={}, records=None, warnings=tuple(report.warnings), time_warnings=())
    est = Estimate(memory=memory_record(report, num_gpus, warnings=prep.warnings),
                   time=time_record(prep, report),
                   tokens=tokens_record(prep, report), cost=cost_record(prep, report))
    return dataclasses.asdict(est)


__all__ = ["estimate_memory", "estimate_time", "estimate_tokens", "estimate_cost", "estimate",
           "adr_output", "MODEL_LOAD_SECONDS", "CHECKPOINT_SECONDS", "logger"]
