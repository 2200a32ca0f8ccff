"""``fmest probe``: run jobs for real (cpu/cuda) or on fake tensors and record one row each.

    fmest probe --model M [estimate flags] --device {cpu,cuda,fake} --output rows.csv
    fmest probe ... --sweep grid.yaml [--jobs 2] [--threads 1] [--timeout 600]

Each configuration runs in its own subprocess (``python -m fmest_torch_runner.probe
--worker``), so an out-of-memory kill or a crash becomes a recorded row (status ``oom`` /
``error``) instead of ending the sweep. Rows are appended as they complete; configurations whose
``config_hash`` is already in the output file are skipped (resume).

Sweep file: a YAML mapping of job field paths to lists; the cartesian product is run::

    training.seq_len: [128, 256]
    training.activation_checkpointing: [none, full]
    model+model_config:            # several paths joined by "+": zipped values
      - [tiny-llama, {model_type: llama, hidden_size: 256, ...}]
      - [tiny-gpt2, configs/gpt2-tiny.json]   # a config file, relative to the YAML

A scalar instead of a list is a single value.
"""

from __future__ import annotations

import copy
import csv
import io
import itertools
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

import attrs

from fmest.errors import InputError
from fmest_torch_runner.records import CATEGORIES, RUNNER_VERSION
from fmest_torch_runner.worker_process import ROW_MARK, config_hash, run_in_subprocess

DEVICES = ("cpu", "cuda", "fake")
PHASE_WINDOWS = tuple(f"s{s}_{k}" for s in (1, 2) for k in ("forward", "backward", "optimizer"))
BREAKDOWN = CATEGORIES  # one at_peak_{category}_bytes column each

COLUMNS = (
    ["config_hash", "status", "error", "device",
     # job features
     "model", "model_type", "params", "trainable_params", "num_layers", "hidden_size",
     "num_attention_heads", "num_kv_heads", "intermediate_size", "vocab_size",
     "tie_word_embeddings", "dtype", "precision", "precision_resolved", "technique",
     "lora_rank", "lora_alpha", "lora_target_modules", "optimizer", "optimizer_impl",
     "optimizer_impl_resolved", "seq_len", "micro_batch_size", "grad_accum_steps",
     "activation_checkpointing", "attention", "attention_resolved", "dp", "tp", "pp", "cp",
     "ep", "zero_stage", "fsdp", "gpu", "world_size",
     # theory
     "theory_peak_bytes", "theory_plugin", "theory_basis",
     # measurements
     "measured_peak_bytes", "measured_reserved_bytes", "measured_step_seconds",
     "tracker_peak_bytes", "start_bytes", "peak_phase"]
    + [f"peak_{w}_bytes" for w in PHASE_WINDOWS]
    + [f"at_peak_{c}_bytes" for c in BREAKDOWN]
    + ["step1_seconds", "step2_seconds", "run_wall_seconds",
       # environment
       "torch_version", "transformers_version", "peft_version", "fmest_version",
       "runner_version", "python_version", "cpu_name", "gpu_name", "num_threads",
       "created_utc", "job_json"])


# -- sweep expansion -------------------------------------------------------------------------

def _set_path(d: dict, path: str, value: Any) -> None:
    parts = path.split(".")
    cur = d
    for p in parts[:-1]:
        nxt = cur.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise InputError(f"--sweep {path}", f"{p!r} is not a section")
        cur = nxt
    cur[parts[-1]] = value


def _load_model_config(value: Any, base: Path) -> Any:
    if isinstance(value, str):
        path = (base / value) if not os.path.isabs(value) else Path(value)
        try:
            with open(path, encoding="utf-8") as fh:
                return json.load(fh)
        except OSError as exc:
            raise InputError("--sweep model_config",
                             f"cannot read {path}: {exc.strerror}") from None
    return value


def load_sweep(path: str) -> list[tuple[list[str], list[Any]]]:
    """The axes of a sweep file: ``[(paths, values)]`` (one path unless zipped with ``+``).
    A key is a job field path (``training.seq_len``) or a flag's JSON name (``seq_len``,
    ``micro_batch``, ``zero``), mapped through the flag table (:func:`fmest.flags.job_path`)."""
    import yaml

    from fmest.flags import job_path

    try:
        with open(path, encoding="utf-8") as fh:
            grid = yaml.safe_load(fh)
    except OSError as exc:
        raise InputError("--sweep", f"cannot read: {exc.strerror}", value=path) from None
    except yaml.YAMLError as exc:
        raise InputError("--sweep", f"malformed YAML: {exc}", value=path) from None
    if not isinstance(grid, dict) or not grid:
        raise InputError("--sweep", "expected a non-empty mapping of job field paths to lists",
                         value=path)
    base = Path(path).resolve().parent
    axes = []
    for key, values in grid.items():
        paths = [job_path(p.strip()) for p in str(key).split("+")]
        if not isinstance(values, list):
            values = [values]
        if not values:
            raise InputError(f"--sweep {key}", "empty list of values")
        if len(paths) > 1:
            for v in values:
                if not isinstance(v, list) or len(v) != len(paths):
                    raise InputError(f"--sweep {key}", f"each value must be a list of "
                                     f"{len(paths)} items (one per path)", value=v)
        fixed = []
        for v in values:
            vs = v if len(paths) > 1 else [v]
            vs = [_load_model_config(x, base) if p == "model_config" else x
                  for p, x in zip(paths, vs, strict=True)]
            fixed.append(vs)
        axes.append((paths, fixed))
    return axes


def expand(base_job: dict, axes) -> list[dict]:
    """Job dicts of the cartesian product of ``axes`` over ``base_job``."""
    out = []
    for combo in itertools.product(*[vals for _, vals in axes]):
        d = copy.deepcopy(base_job)
        for (paths, _), vs in zip(axes, combo, strict=True):
            for p, v in zip(paths, vs, strict=True):
                _set_path(d, p, copy.deepcopy(v))
        out.append(d)
    return out


# -- output ------------------------------------------------------------------------------------

def _fmt(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str) and ("\n" in v or "\r" in v):
        # one row, one line: a kill mid-write then leaves at most one partial last line
        return " | ".join(part for part in v.splitlines() if part.strip())
    return v


#: rows that say "a package is missing in the worker's environment" rather than anything about
#: the configuration: not counted as done, so the run after installing it probes them again
_MISSING_PACKAGE = "No module named"


def missing_package(row: dict) -> bool:
    """Whether ``row`` failed because the worker could not import a package (torch,
    transformers, peft: ``ModuleNotFoundError``); such rows are recorded but not done."""
    return row.get("status") == "error" and _MISSING_PACKAGE in str(row.get("error") or "")


def require_packages(device: str, packages: tuple[str, ...] = ("torch", "transformers")) -> None:
    """Fail at the door, in one line, when the local workers cannot import ``packages``:
    without this every configuration of the sweep would become an ``error`` row."""
    import importlib.util

    def importable(name: str) -> bool:
        if name in sys.modules:
            return sys.modules[name] is not None
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            return False

    missing = [p for p in packages if not importable(p)]
    if missing:
        from fmest.errors import PluginError

        raise PluginError("torch_runner", f"fmest probe --device {device} runs the model with "
                          f"{' and '.join(packages)}; not installed: {', '.join(missing)} "
                          f"(pip install {' '.join(missing)}); nothing was probed")


class RowWriter:
    """Appends rows to a CSV or Parquet file; a kill loses at most the row being written.

    CSV: each row is one line written with one ``write`` and fsynced; a partial last line
    left by a kill is ignored when reading and cut off before the next append. Parquet cannot
    append: the file is rewritten whole through a temporary file and ``os.replace``
    (:func:`fmest.atomic.write_atomic`). Any ``OSError`` is an :class:`InputError` naming
    ``--output``.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.parquet = path.lower().endswith((".parquet", ".pq"))
        if not self.parquet and not path.lower().endswith(".csv"):
            raise InputError("--output", "must end in .csv or .parquet", value=path)
        self.lock = threading.Lock()

    def _error(self, exc: OSError, doing: str = "write") -> InputError:
        from fmest.atomic import os_reason

        return InputError("--output", f"cannot {doing} {self.path}: {os_reason(exc)}",
                          value=self.path)

    def check(self) -> None:
        """Before any probe runs: the file can be written (a missing directory is made at the
        first row) and a partial last CSV line from an interrupted run is cut off."""
        from fmest.atomic import check_writable_dir

        if self.parquet:
            try:
                import pyarrow.parquet  # noqa: F401
            except ImportError:
                raise InputError("--output", "a Parquet file needs pyarrow, which is not "
                                 "installed (pip install 'fmest-torch-runner[parquet]'); or "
                                 "name a .csv file", value=self.path) from None

        directory = os.path.dirname(os.path.abspath(self.path))
        check_writable_dir(directory, field="--output", value=self.path)
        if os.path.isdir(self.path):
            raise InputError("--output", "is a directory", value=self.path)
        try:
            if os.path.exists(self.path):
                with open(self.path, "ab"):  # can be appended to (or replaced, Parquet)
                    pass
                if not self.parquet:
                    self._cut_partial_line()
        except OSError as exc:
            raise self._error(exc) from None

    def _cut_partial_line(self) -> None:
        with open(self.path, "rb") as fh:
            data = fh.read()
        keep = data.rfind(b"\n") + 1
        if keep < len(data):
            sys.stderr.write(f"fmest probe: {self.path}: removed an incomplete last line "
                             f"({len(data) - keep} bytes) left by an interrupted run; its "
                             "configuration runs again\n")
            os.truncate(self.path, keep)

    def done_hashes(self) -> set[str]:
        """``config_hash`` of the rows already written: whole rows only (a partial last line
        is not done), and not rows that failed for a missing package (:func:`missing_package`)."""
        try:
            if not os.path.exists(self.path) or os.path.getsize(self.path) == 0:
                return set()
            rows = self._read_parquet() if self.parquet else self._read_csv()
        except OSError as exc:
            raise self._error(exc, "read") from None
        return {r["config_hash"] for r in rows
                if r.get("config_hash") and not missing_package(r)}

    def _read_parquet(self) -> list[dict]:
        import pyarrow.parquet as pq

        try:
            names = pq.read_schema(self.path).names
            cols = [c for c in ("config_hash", "status", "error") if c in names]
            rows = pq.read_table(self.path, columns=cols).to_pylist()
        except OSError:
            raise
        except Exception as exc:  # pyarrow's ArrowInvalid: not a (whole) Parquet file
            raise InputError("--output", f"exists but is not a readable Parquet file ({exc}); "
                             "give a new file", value=self.path) from None
        if "config_hash" not in cols:
            raise InputError("--output", "exists but has no config_hash column; give a new "
                             "file", value=self.path)
        return rows

    def _read_csv(self) -> list[dict]:
        with open(self.path, "rb") as fh:
            data = fh.read()
        whole = data[:data.rfind(b"\n") + 1]  # a partial last line is not a row
        try:
            text = whole.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError("--output", f"exists but is not UTF-8 CSV ({exc}); give a new "
                             "file", value=self.path) from None
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if not reader.fieldnames or "config_hash" not in reader.fieldnames:
            raise InputError("--output", "exists but has no config_hash column; give a new "
                             "file", value=self.path)
        width = len(reader.fieldnames)
        # a row with missing or extra fields was cut or mangled: not done
        return [r for r in reader if None not in r and len(r) == width
                and None not in r.values()]

    def append(self, row: dict) -> None:
        with self.lock:
            try:
                self._append(row)
            except OSError as exc:
                raise self._error(exc) from None

    def _append(self, row: dict) -> None:
        if self.parquet:
            import pyarrow as pa
            import pyarrow.parquet as pq

            from fmest.atomic import write_atomic

            rec = {c: [None if row.get(c) in (None, "") else str(row.get(c))] for c in COLUMNS}
            new = pa.table(rec, schema=pa.schema([(c, pa.string()) for c in COLUMNS]))
            if os.path.exists(self.path):
                new = pa.concat_tables([pq.read_table(self.path), new])
            write_atomic(self.path, lambda tmp: pq.write_table(new, tmp))
            return
        fresh = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
        if fresh:
            w.writeheader()
        w.writerow({c: _fmt(row.get(c)) for c in COLUMNS})
        data = buf.getvalue().encode("utf-8")
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)


# -- the worker (one configuration, in its own process) ----------------------------------------

def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: str) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    def v(d):
        try:
            return version(d)
        except PackageNotFoundError:
            return ""

    import torch

    gpu = ""
    if device == "cuda" and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name()
    return {"device": device, "torch_version": torch.__version__,
            "transformers_version": v("transformers"), "peft_version": v("peft"),
            "fmest_version": v("fmest"), "runner_version": RUNNER_VERSION,
            "python_version": platform.python_version(), "cpu_name": _cpu_name(),
            "gpu_name": gpu, "num_threads": torch.get_num_threads(),
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def job_features(job, ctx) -> dict:
    from fmest.physics.counting import total_params, trainable_params

    m, tr, par = ctx.model, job.training, job.parallelism
    row = {"model": job.model, "model_type": m.model_type, "num_layers": m.num_layers,
           "hidden_size": m.hidden_size, "num_attention_heads": m.num_attention_heads,
           "num_kv_heads": m.num_kv_heads, "intermediate_size": m.intermediate_size,
           "vocab_size": m.vocab_size, "tie_word_embeddings": m.tie_word_embeddings,
           "gpu": job.hardware.gpu, "world_size": ctx.layout.world_size, "dp": ctx.layout.dp}
    for k in ("dtype", "precision", "technique", "lora_rank", "lora_alpha", "optimizer",
              "optimizer_impl", "seq_len", "micro_batch_size", "grad_accum_steps",
              "activation_checkpointing", "attention"):
        row[k] = getattr(tr, k)
    row["lora_target_modules"] = ",".join(tr.lora_target_modules)
    for k in ("tp", "pp", "cp", "ep", "zero_stage", "fsdp"):
        row[k] = getattr(par, k)
    try:
        row["params"] = total_params(m, tr)
        row["trainable_params"] = trainable_params(m, tr)
    except Exception:  # counting is a feature, not a requirement of the probe
        pass
    return row


def probe_one(job_dict: dict, device: str, *, theory: bool = True,
              steps: Optional[int] = None, warmup: int = 0) -> dict:
    """Run one configuration in this process and return its row. ``steps``/``warmup``: run
    ``warmup + steps`` optimizer steps (at least the runner's two: optimizer states exist from
    step 2) and time the ``steps`` after the warm-up (the LLM/VLM GPU Memory Estimator's
    ``--probe-steps`` / ``--probe-warmup``); the peaks are over every step."""
    from fmest.convert import job_from_dict, job_to_dict

    row: dict[str, Any] = {"device": device, "status": "error"}
    row["config_hash"] = config_hash(job_dict, device)
    try:
        job = job_from_dict(job_dict)
        row["job_json"] = json.dumps(job_to_dict(job), sort_keys=True, default=str)
        from fmest.engine import Engine

        engine = Engine()
        ctx = engine.context(job)
        row.update(job_features(job, ctx))
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
        row.update(environment(device))
        return row
    if theory:
        try:
            d = engine.estimate_memory(job.evolve(options={"method": "theory"}), ctx)
            if d.chosen is not None:
                row["theory_peak_bytes"] = d.chosen.total_bytes
                row["theory_plugin"] = d.chosen.provenance.plugin
                row["theory_basis"] = d.chosen.provenance.basis
        except Exception:
            pass
    from fmest_torch_runner.runner import Unsupported, run, run_spec_from_job

    try:
        # the engine's precision (the training stack decides before the sharding strategy)
        precision = ctx.transforms.precision if ctx.transforms is not None else None
        spec = run_spec_from_job(job, ctx.model, optimizer_name=ctx.optimizer.name,
                                 device=device, sharding=ctx.sharding, precision=precision)
    except Unsupported as exc:
        row.update(status="unsupported", error=str(exc))
        row.update(environment(device))
        return row
    if steps is not None:
        spec = attrs.evolve(spec, steps=max(spec.steps, warmup + steps))
    row["precision_resolved"] = spec.precision
    row["optimizer_impl_resolved"] = spec.optimizer_impl
    row["attention_resolved"] = spec.attention
    res = run(spec, device)
    row.update(status=res.status, error=res.error)
    if res.params is not None:
        row["params"], row["trainable_params"] = res.params, res.trainable_params
    row["measured_peak_bytes"] = res.peak_bytes
    row["measured_reserved_bytes"] = res.reserved_peak_bytes
    row["tracker_peak_bytes"] = res.tracker_peak_bytes
    row["start_bytes"] = res.start_bytes
    row["peak_phase"] = res.peak_window
    for w in PHASE_WINDOWS:
        row[f"peak_{w}_bytes"] = res.phase_peaks_bytes.get(w)
    for c in BREAKDOWN:
        row[f"at_peak_{c}_bytes"] = res.breakdown_bytes.get(c)
    st = res.step_seconds
    row["step1_seconds"] = st[0] if st else None
    row["step2_seconds"] = st[1] if len(st) > 1 else None
    timed = st[warmup:] if steps is not None and len(st) > warmup else st[-1:]
    row["measured_step_seconds"] = statistics.median(timed) if timed else None
    row["steps_run"] = len(st)
    row["run_wall_seconds"] = res.wall_seconds
    row.update(environment(device))
    return row


def worker_main(argv: Optional[list[str]] = None) -> int:
    """``python -m fmest_torch_runner.probe --worker --device D [--threads N] [--no-theory]``
    reads one job JSON on stdin and prints its row as one marked JSON line."""
    import argparse

    p = argparse.ArgumentParser(prog="fmest_torch_runner.probe")
    p.add_argument("--worker", action="store_true", required=True)
    p.add_argument("--device", choices=DEVICES, required=True)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--no-theory", action="store_true")
    args = p.parse_args(argv)
    job_dict = json.loads(sys.stdin.read())
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    row = probe_one(job_dict, args.device, theory=not args.no_theory)
    sys.stdout.write(ROW_MARK + json.dumps(row, default=str) + "\n")
    sys.stdout.flush()
    return 0


# -- the command -------------------------------------------------------------------------------

def add_arguments(parser) -> None:
    from fmest.flags import JOB_FLAGS, format_flag
    from fmest.flags import add_arguments as add_flags

    add_flags(parser, (*JOB_FLAGS, format_flag("table", "json")))
    g = parser.add_argument_group("probe")
    g.add_argument("--device", choices=DEVICES, default="cpu",
                   help="cpu: real steps, allocator truth; cuda: real steps on a GPU; "
                   "fake: fake-tensor trace (default cpu)")
    g.add_argument("--output", "-o", required=True, metavar="rows.csv|rows.parquet",
                   help="file the rows are appended to (configurations already in it are "
                   "skipped)")
    g.add_argument("--sweep", metavar="grid.yaml", help="YAML mapping of job field paths to "
                   "lists; runs the cartesian product")
    g.add_argument("--jobs", type=int, default=1, help="configurations run at once (default 1; "
                   "local executor only: Ray runs as many as the cluster's resources hold)")
    g.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: subprocesses on this machine (default); ray: one Ray task per "
                   "configuration (num_gpus=1 for cuda), a dead worker retried once "
                   "(needs fmest-torch-runner[ray])")
    g.add_argument("--address", metavar="ADDR", help="Ray cluster to run on (ray.init's "
                   "address: auto, host:6379, ray://host:10001; default RAY_ADDRESS or a new "
                   "local instance); --executor ray only")
    g.add_argument("--threads", type=int, default=1,
                   help="torch threads per configuration (default 1; 0 = torch's default)")
    g.add_argument("--timeout", type=float, default=600.0, help="seconds per configuration")
    g.add_argument("--no-theory", action="store_true",
                   help="skip the theory estimate column")


class _Progress:
    """The sweep's progress on stderr (fmest.output.render: a bar on a terminal, one line per
    finished configuration in a log) with the count of each status; the elapsed time and the
    one ETA are the display's (:func:`fmest.output.render.eta_seconds`), not computed here."""

    def __init__(self, total: int, skipped: int, *, stream=None) -> None:
        from fmest.output.render import Progress

        self.total, self.skipped, self.done = total, skipped, 0
        self.counts: dict[str, int] = {}
        self.bar = Progress(f"probing ({skipped} already done)", total, enabled=True,
                            stream=stream, timing=True)

    def update(self, status: str) -> None:
        self.done += 1
        self.counts[status] = self.counts.get(status, 0) + 1
        counts = " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        self.bar.update(self.done, detail=counts)
        if self.done >= self.total:
            self.bar.close()


def run_command(args, engine) -> int:
    from fmest.api import job_dict
    from fmest.convert import job_from_dict, job_to_dict

    if args.jobs < 1:
        raise InputError("--jobs", "must be >= 1", value=args.jobs)
    if args.address and args.executor != "ray":
        raise InputError("--address", "needs --executor ray", value=args.address)
    writer = RowWriter(args.output)
    writer.check()
    if args.executor == "local":  # Ray's nodes need the packages, not the driver (docs)
        require_packages(args.device)
    placeholder = False
    if args.sweep and not args.model and not args.input_file:
        args.model, placeholder = "__from_sweep__", True
    base = job_dict(args)
    axes = load_sweep(args.sweep) if args.sweep else []
    jobs = expand(base, axes)
    normalised = []
    for i, d in enumerate(jobs):
        if placeholder and d.get("model") == "__from_sweep__":
            raise InputError("--model", "required unless the sweep sets 'model'")
        try:
            job = job_from_dict(d)
        except InputError as exc:
            raise InputError(exc.field if hasattr(exc, "field") else "--sweep",
                             f"configuration {i + 1} of {len(jobs)}: {exc}") from None
        normalised.append(job_to_dict(job))
    done = writer.done_hashes()
    todo, seen = [], set()
    for d in normalised:
        h = config_hash(d, args.device)
        if h in done or h in seen:
            continue
        seen.add(h)
        todo.append(d)
    skipped = len(normalised) - len(todo)
    progress = _Progress(len(todo), skipped)
    if not todo:
        sys.stderr.write(f"nothing to do: all {len(normalised)} configurations are already in "
                         f"{args.output}\n")
        return 0

    def record(row):
        writer.append(row)
        with writer.lock:
            progress.update(row.get("status", "error"))
        return row

    def one(d):
        return record(run_in_subprocess(d, args.device, threads=args.threads,
                                        timeout=args.timeout, theory=not args.no_theory))

    if args.executor == "ray":
        from fmest_torch_runner.ray_executor import run_sweep

        rows = run_sweep(todo, args.device, on_row=record, address=args.address,
                         threads=args.threads, timeout=args.timeout, theory=not args.no_theory)
    elif args.jobs == 1:
        rows = [one(d) for d in todo]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            rows = list(pool.map(one, todo))
    bad = [r for r in rows if r.get("status") not in ("ok", "unsupported", "oom")]
    sys.stderr.write(f"wrote {len(rows)} rows to {args.output} "
                     f"({skipped} skipped as already present)\n")
    for r in bad[:5]:
        sys.stderr.write(f"  {r.get('config_hash')}: {r.get('status')}: {r.get('error')}\n")
    missing = sum(missing_package(r) for r in rows)
    if missing:
        sys.stderr.write(f"{missing} configurations failed for a package missing where they "
                         "ran (No module named ...): not counted as done; the same command "
                         "runs them again once it is installed\n")
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
