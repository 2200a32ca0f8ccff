"""What one request's work runs on, in the server's threads or in a worker process
(:mod:`fmest.serve.workers`): the service's engine and the estimate answer."""

from __future__ import annotations

import json
import threading

from fmest.bounds import Bound
from fmest.errors import InputError
from fmest.serve.files import FileAccess
from fmest.serve.inputs import INPUT_SOURCE

#: Policies that answer from formulas only and may run in parallel threads. Every other policy
#: may trace with torch (process-wide dispatch state) or load bundles, and runs one at a time.
CONCURRENT_METHODS = frozenset({"theory"})
#: Jobs one request may hold (an EstimateInput's ``job_configs``), checked once the body is
#: read and before any is resolved.
JOBS_BOUND = Bound(path="job_configs", maximum=64,
                   reason="jobs in one request, each a whole estimate with its largest-micro-"
                          "batch search (about 3 ms by formulas, tens of seconds traced) within "
                          "the one --timeout; send more jobs in more requests")



class ServiceEngine:
    """The engine shared by the worker threads.

    Model resolution fills the engine's model cache and may read files or reach the Hub; it
    runs under a lock (the engine's ``resolve_model`` is wrapped on this instance) so
    concurrent first requests for a model load it once. Policies outside
    :data:`CONCURRENT_METHODS` run one at a time (see there).
    """

    def __init__(self, engine) -> None:
        self.engine = engine
        #: the CLI's plugin commands (``fmest plan`` among them when the planner is installed)
        self.commands = engine.commands()
        self.exclusive = threading.Lock()
        resolve_lock = threading.RLock()
        original = engine.resolve_model

        def resolve_model(job):
            with resolve_lock:
                return original(job)

        engine.resolve_model = resolve_model


def estimate_response(args, job_input, service: ServiceEngine, access: FileAccess) -> str:
    """The JSON text ``fmest estimate --format json -f INPUT FLAGS`` prints for the parsed
    body: the CLI's own use cases (:func:`fmest.api.read_jobs`, through ``access``'s file
    checks, :func:`fmest.api.estimate_jobs`) and renderer
    (:func:`fmest.output.report.reports_to_dict`)."""
    from fmest import api
    from fmest.inputs import read_document
    from fmest.output.report import reports_to_dict

    layers = read_document(job_input, source=INPUT_SOURCE) if job_input is not None else None
    if layers is not None and len(layers) > JOBS_BOUND.maximum:
        raise InputError(JOBS_BOUND.path, f"above this service's bound "
                         f"{JOBS_BOUND.maximum:g}: {JOBS_BOUND.reason}", value=len(layers))
    pairs = access.read_jobs(args, job_layers=layers, registries=service.engine.registries)
    if all(job.options.method in CONCURRENT_METHODS for job, _ in pairs):
        report = api.estimate_jobs(pairs, engine=service.engine)
    else:
        with service.exclusive:
            report = api.estimate_jobs(pairs, engine=service.engine)
    return json.dumps(reports_to_dict(report), default=str)
