"""fm-training-estimator ``EstimateInput`` JSON, read by :mod:`fmest.compat.fm_training_estimator`.

``fmest estimate --config`` and ``fmest.estimate`` hand an EstimateInput to the input door
(:mod:`fmest.inputs`), which estimates every ``job_configs`` entry. This mapper serves
:func:`fmest.configs.load_configs` alone (one merged job): it maps the first entry and reports
the later ones as ignored.
"""

from __future__ import annotations

from fmest.compat import fm_training_estimator as compat
from fmest.configs._base import Sink
from fmest.errors import InputError

FORMAT = "fm-training-estimator"


def map_config(doc: dict, sink: Sink) -> None:
    try:
        jobs, ignored = compat.estimate_input_jobs(doc)
    except InputError as exc:  # the compat reader's errors name the key, not the file
        raise exc.at(f"{sink.name}: {exc.field}") from None
    for entry in ignored:
        if entry.startswith("job_configs[0]") or not entry.startswith("job_configs["):
            sink.ignored.append(entry)
    for i in range(1, len(jobs)):
        sink.ignore(f"job_configs[{i}]", "load_configs merges one job; fmest estimate --config "
                    "and fmest.estimate estimate every job of an EstimateInput")
    from fmest.compat.fm_training_estimator.reader import DEFAULTS_KEY

    defaults = jobs[0].pop(DEFAULTS_KEY, {})
    for section, values in jobs[0].items():
        key = "job_configs[0]"
        if section == "model":
            sink.set("model", values, f"{key}.fm.base_model_path")
            continue
        if section == "options":
            key = "estimator_metadata.method"
        for field, value in values.items():
            path = f"{section}.{field}"
            sink.set(path, value, defaults.get(path, key))
