"""OpenAPI pieces of the service, generated from the flag table (:mod:`fmest.flags`) like the
command line, so the schema, the page's form and the CLI name the same knobs in the same
groups.

Each flag property carries ``x-flag`` (its ``--option``) and ``x-group`` (the CLI's argument
group: input, training, parallelism, hardware, workload, pricing, answer); the page builds its
form from them.
"""

from __future__ import annotations

from typing import Any, Optional

from fmest import flags as flag_table
from fmest.flags import Flag, json_schema

DESCRIPTION = (
    "Estimate per-GPU memory, step time, tokens/s and cost of LLM training runs. "
    "`POST /v1/estimate` takes the job in any form `fmest estimate -f` accepts (an fmest job "
    "or an fm-training-estimator EstimateInput, at the top level or under `input`) plus any "
    "`fmest estimate` flag by its JSON name (`--seq-len` -> `seq_len`); flags win. The answer "
    "is exactly `fmest estimate --format json`. Errors are "
    '`{"error": {"field": ..., "message": ..., "accepted": [...]}}`.')

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["error"],
    "properties": {"error": {
        "type": "object", "required": ["field", "message", "accepted"],
        "properties": {
            "field": {"type": ["string", "null"],
                      "description": "path of the offending value (a flag's JSON name or a job "
                                     "field such as training.seq_len); null when no field is to "
                                     "blame"},
            "message": {"type": "string"},
            "accepted": {"type": "array", "description": "accepted values, when enumerable"},
        }}},
}

#: The top-level fields of ``fmest estimate --format json`` (report_to_dict's contract).
ESTIMATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["model", "job", "layout", "gpu", "memory", "time", "tokens", "cost",
                 "provenance", "warnings", "decisions"],
    "properties": {
        "model": {"type": "object"}, "job": {"type": "object"}, "layout": {"type": "object"},
        "gpu": {"type": "object", "required": ["name", "memory_bytes"]},
        "memory": {"type": ["object", "null"], "properties": {
            "total_bytes": {"type": "number"}, "components": {"type": "object"},
            "phase_peaks_bytes": {"type": "object"}, "gpu_memory_bytes": {"type": "number"},
            "allocated_bytes": {"type": "integer"}, "reserved_bytes": {"type": "integer"},
            "device_bytes": {"type": "integer"},
            "fits": {"type": ["boolean", "null"]},
            "max_micro_batch": {"type": ["integer", "null"]}}},
        "time": {"type": ["object", "null"]}, "tokens": {"type": ["object", "null"]},
        "cost": {"type": ["object", "null"]}, "provenance": {"type": "object"},
        "warnings": {"type": "array", "items": {"type": "string"}},
        "decisions": {"type": "object"},
    },
}

_JOB_SECTION = {"type": "object", "description": "a section of the fmest job layout "
                "(docs/cli.md); its fields as in `fmest estimate --format json`'s `job`"}


def request_schema(flags: tuple[Flag, ...], example: dict) -> dict[str, Any]:
    """The body of a command's route: its flags by JSON name (with ``x-flag``/``x-group``),
    the job sections and ``input``."""
    props: dict[str, Any] = {f.dest: json_schema(f) for f in flags if not f.server_side}
    for section in ("training", "parallelism", "hardware", "workload", "pricing", "options"):
        props[section] = dict(_JOB_SECTION)
    props["model_config"] = {"type": "object", "description": "an inline Hugging Face "
                             "config.json (the model's shape); `model` then names it"}
    props["job_configs"] = {"type": "array", "items": {"type": "object"}, "description":
                            "fm-training-estimator EstimateInput jobs"}
    for key in ("estimator", "estimator_metadata"):
        props[key] = {"type": "object", "description": "fm-training-estimator EstimateInput "
                      "estimator metadata"}
    props["input"] = {"type": "object", "description": "the job as `-f` reads it (fmest job or "
                      "EstimateInput); the other fields are then flags"}
    return {"type": "object", "properties": props, "additionalProperties": False,
            "example": example}


EXAMPLE = {"model": "meta-llama/Llama-2-7b-hf", "gpu": "A100-80GB", "per_device_batch": 2,
           "seq_len": 4096, "zero": 3, "gpus_per_node": 8, "dataset_tokens": 1e9}


def _json(schema: dict) -> dict:
    return {"application/json": {"schema": schema}}


def _errors(*codes: int) -> dict:
    text = {413: "request body over the size limit", 422: "bad input (field named)",
            500: "a bug (logged by the server; no traceback in the body)",
            501: "not available in this installation", 504: "over the time limit"}
    return {str(c): {"description": text[c], "content": _json(ERROR_SCHEMA)} for c in codes}


def fmte_openapi() -> dict:
    """fm-training-estimator's ``/api/estimate`` (docs/compat.md): its flat config as JSON text
    (the raw body, or a JSON string of it), its flat answer JSON-encoded into a string."""
    config = {"type": "object", "description": "the flat config: fields of FMArguments, "
              "TrainingArguments, InfraArguments, DataArguments, PeftLoraConfig and "
              "PeftQLoraConfig at the top level (or an EstimateInput)",
              "example": {"base_model_path": "ibm-granite/granite-3b-code-base",
                          "numGpusPerPod": 2, "per_device_train_batch_size": 4,
                          "block_size": 512}}
    body = {"oneOf": [config, {"type": "string", "description": "the config's JSON text"}]}
    return {"requestBody": {"required": True, "content": {
                "application/json": {"schema": body},
                "application/x-www-form-urlencoded": {"schema": {"type": "string"}},
                "text/plain": {"schema": {"type": "string"}}}},
            "responses": {"200": {"description": "the original's flat answer (memory parts "
                                  "in bytes and as sizes, num_gpus, tps, time) as a JSON "
                                  "string: decode twice",
                                  "content": _json({"type": "string"})},
                          **_errors(413, 422, 500, 504)}}


def estimate_openapi() -> dict:
    return {"requestBody": {"required": True, "content": _json(
                request_schema(flag_table.ESTIMATE_FLAGS, EXAMPLE))},
            "responses": {"200": {"description": "`fmest estimate --format json`: one job's "
                                  "object, or `{\"jobs\": [...]}` for a multi-job EstimateInput",
                                  "content": _json({"anyOf": [ESTIMATE_SCHEMA, {
                                      "type": "object", "required": ["jobs"],
                                      "properties": {"jobs": {"type": "array",
                                                              "items": ESTIMATE_SCHEMA}}}]})},
                          **_errors(413, 422, 500, 504)}}


def plan_openapi(flags: Optional[tuple[Flag, ...]]) -> dict:
    """``POST /v1/plan``: the ``fmest plan`` flags when the planner is installed."""
    body = (request_schema(flags, dict(EXAMPLE, max_gpus=16, objective="pareto"))
            if flags is not None else {"type": "object"})
    return {"requestBody": {"required": True, "content": _json(body)},
            "responses": {"200": {"description": "`fmest plan --format json`",
                                  "content": _json({"type": "object",
                                                    "required": ["plans"]})},
                          **_errors(413, 422, 500, 501, 504)}}


def list_openapi(item: str) -> dict:
    return {"responses": {"200": {"description": f"{item} listing", "content": _json(
        {"type": "array", "items": {"type": "object"}})}, **_errors(500)}}


def health_openapi() -> dict:
    return {"responses": {"200": {"description": "the server is up", "content": _json(
        {"type": "object", "required": ["status", "version", "plugins", "load_errors", "plan"]})},
        **_errors(500)}}
