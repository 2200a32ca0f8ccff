"""fm-training-estimator ``EstimateInput`` JSON, read by :mod:`fmest.compat.fm_training_estimator`.

Only the first ``job_configs`` entry is one job; later entries are reported as ignored (estimate
them one file each).
"""

from __future__ import annotations

from fmest.compat import fm_training_estimator as compat
from fmest.configs._base import Sink

FORMAT = "fm-training-estimator"


def map_config(doc: dict, sink: Sink) -> None:
    try:
        _jobs, ignored = compat.jobs_from_estimate_input(doc)  # validates every job config
        configs = compat._get(doc, "job_configs", "jobConfigs")
        meta = compat._get(doc, "estimator_metadata", "estimator", "estimatorMetadata",
                           default={}) or {}
        method = meta.get("method")
        job, _ = compat._job_from_config(configs[0], 0, method.lower() if isinstance(
            method, str) else None)
    except Exception as exc:  # the compat reader's errors name the key, not the file
        from fmest.errors import InputError

        if isinstance(exc, InputError):
            raise sink.error(exc.field, str(exc)[len(exc.field) + 2:]) from None
        raise
    for entry in ignored:
        if entry.startswith("job_configs[0]") or not entry.startswith("job_configs["):
            sink.ignored.append(entry)
    for i in range(1, len(configs)):
        sink.ignore(f"job_configs[{i}]", "fmest estimates one job per run; put each job in its "
                    "own file")
    for section, values in job.items():
        key = "job_configs[0]"
        if section == "model":
            sink.set("model", values, f"{key}.fm.base_model_path")
            continue
        if section == "options":
            key = "estimator_metadata.method"
        for field, value in values.items():
            sink.set(f"{section}.{field}", value, key)
