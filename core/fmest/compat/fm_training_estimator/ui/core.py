"""``run`` (``fm_training_estimator/ui/core.py`` @ 1d04f05): a flat config answered as the
original's flat dict, which its CLI prints and its REST route returns.

Keys, as the original's: ``total_mem_estimate_og``, ``activation_memory_og``,
``gradient_memory_og``, ``model_memory_og``, ``optimizer_memory_og`` (bytes, floats) and the
same five as readable sizes; ``num_gpus``; ``tps``; with a dataset ``tokens_per_sample``,
``total_tokens``, ``time`` and ``time_train`` (seconds). An input no GPU count fits answers
``{"error": "Input configuration is infeasible!"}`` as the original does (with ``reason``).
fmest adds ``memory_phase`` and ``warnings`` (every input it could not honour).
``tokens_per_sample`` is the dataset's mean tokens per record (the original's TE0 estimates a
padded batch width; fmest does not model padding).
"""

from __future__ import annotations

import os
from typing import Any, Optional


def run(config: Any, lookup_data_path: Optional[str] = None, model_path: Optional[str] = None,
        *, engine=None) -> dict:
    """The original's flat answer for a flat ``config`` (dict or JSON/YAML path); an
    ``EstimateInput`` (it has ``job_configs``) is accepted too."""
    from fmest.compat.fm_training_estimator import sdk
    from fmest.compat.fm_training_estimator.config.parser import flat_to_estimate_input

    if isinstance(config, (str, os.PathLike)) and os.path.isfile(os.fspath(config)):
        from fmest.compat.fm_training_estimator.utils import unmarshal

        config = unmarshal(os.fspath(config))
    if isinstance(config, dict) and ("job_configs" in config or "jobConfigs" in config):
        data = dict(config)
        if lookup_data_path is not None:
            meta = dict(data.get("estimator_metadata") or data.get("estimator") or {})
            meta.setdefault("base_data_path", os.fspath(lookup_data_path))
            data["estimator_metadata"] = meta
            data.pop("estimator", None)
    else:
        data = flat_to_estimate_input(config, lookup_data_path=lookup_data_path)
    eng = engine if engine is not None else sdk._default_engine()
    try:
        prep = sdk.prepare(data, eng)
    except ValueError as exc:
        if str(exc).startswith("Input configuration is infeasible!"):
            return {"error": "Input configuration is infeasible!",
                    "reason": str(exc)[len("Input configuration is infeasible!"):].strip()}
        raise
    report = eng.estimate(prep.job)
    got = sdk.learned(prep, None if model_path is None else os.fspath(model_path), eng)
    mem = sdk.memory_record(report, prep.num_gpus, got, prep.warnings)
    res: dict[str, Any] = {}
    total = float(sum(mem.parts.values()))
    model = float(sum(mem.parts.get(k, 0) for k in sdk._MODEL_PARTS))
    grad = float(sum(mem.parts.get(k, 0) for k in sdk._GRADIENT_PARTS))
    opt = float(sum(mem.parts.get(k, 0) for k in sdk._OPTIMIZER_PARTS))
    res["total_mem_estimate_og"] = total
    res["activation_memory_og"] = total - model - grad - opt
    res["gradient_memory_og"] = grad
    res["model_memory_og"] = model
    res["optimizer_memory_og"] = opt
    res["total_mem_estimate"] = mem.total_mem_estimate
    res["activation_memory"] = mem.activation_memory
    res["gradient_memory"] = mem.gradient_memory
    res["model_memory"] = mem.model_memory
    res["optimizer_memory"] = mem.optimizer_memory
    res["num_gpus"] = mem.num_gpus
    tokens = sdk.tokens_record(prep, report, got)
    res["tps"] = tokens.tps
    t = sdk.time_record(prep, report, got)
    if prep.records and prep.job.workload.dataset_tokens:
        res["tokens_per_sample"] = int(round(prep.job.workload.dataset_tokens / prep.records))
        res["total_tokens"] = int(prep.job.workload.dataset_tokens)
    if t.time is not None:
        res["time"] = t.time
        res["time_train"] = t.train_time
    res["memory_phase"] = mem.phase
    seen: list[str] = []
    for w in [*mem.warnings, *tokens.warnings, *t.warnings]:
        if w not in seen:
            seen.append(w)
    res["warnings"] = seen
    return res


__all__ = ["run"]
