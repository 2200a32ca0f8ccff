"""GPU micro-benchmarks for fmest's time constants (issue 20): what one GPU really achieves.

    python benchmarks/gpu/microbench.py --budget-s 200            # on a CUDA device
    python benchmarks/gpu/microbench.py --device cpu --tiny        # smoke run, a few seconds

Cases, in this order (the most informative first, so a short budget keeps them):

* ``launch``: kernel launch overhead, a loop of 1-element ``add_`` (eager dispatch + launch) and
  of ``torch.cuda._sleep(0)`` (a minimal kernel), microseconds per launch, host wall clock.
* ``hbm``: HBM bandwidth, STREAM-like (McCalpin, https://www.cs.virginia.edu/stream/ref.html):
  ``copy`` (a = b, 2 words moved per element) and ``triad`` (a = b + s*c, 3 words), GB/s = 1e9.
* ``mamf``: a square bf16 GEMM sweep; the maximum over the sizes is the "maximum achievable
  matmul FLOPS" as Stas Bekman's mamf-finder defines it (stas00/ml-engineering,
  compute/accelerator/benchmarks/mamf-finder.py at 84cf694abd7ac87668d02bbf0ad7e69c6c3b8168):
  B stored as (n, k) and transposed, the L2 cache overwritten (256 MiB zeroed) before every
  timed iteration, FLOPs = 2*m*n*k, median of the iterations. Deviation: a few seconds of
  warm-up instead of its 30 s (budget).
* ``sustained``: one large GEMM (8192^3, bf16, and fp8 where the GPU has it) run back to back
  for ``--sustained-s`` seconds (default 4), each iteration timed with CUDA events: the median
  of the iterations in the first 50 ms (the burst clock) and of those in the last half (the
  clock the power limit holds: the rate the time model gives a step's GEMMs,
  ``fmest_time_roofline.formulas.SUSTAINED_GEMM_FRACTION_*``). The row's ``median_ms`` and
  ``tflops`` are the last half's, ``min_ms`` the fastest iteration, ``reason`` the first 50 ms.
* ``gemm``: the GEMMs of the presets' layers (``core/fmest/models/presets/*.json``, "config"):
  QKV (h -> (heads + 2 kv_heads) * head_dim), O, gate+up (h -> 2 * intermediate, fused as
  most stacks do), down and the LM head, for tokens = micro-batch x seq in a few sizes, in the
  three layouts of training (``fwd`` Y = X W^T, ``dgrad`` dX = dY W, ``wgrad`` dW = dY^T X),
  bf16; and ``fwd`` in fp8 (e4m3, ``torch._scaled_mm``, per-tensor scale 1, bf16 output) when
  the GPU has fp8 (compute capability >= 8.9), else recorded as skipped. FLOPs = 2*T*N*K.
* ``attention``: ``torch.nn.functional.scaled_dot_product_attention``, causal, bf16, each
  backend forced with ``torch.nn.attention.sdpa_kernel`` (flash / efficient / math; cudnn and
  no forced backend, ``default``, whose ``case`` names the backend SDPA picks, at head dim 128
  and seq 2048/8192/16384 only: recent PyTorch prefers cuDNN attention on sm90/sm100), seq len
  512..16384 at batch 16384/seq and model dim 2048 (heads = 2048/head_dim), head dim 64 and
  128: the grid and the FLOP count of the FlashAttention benchmark (Dao-AILab/flash-attention,
  benchmarks/benchmark_flash_attention.py at 0469c72723278048f1b1bd29f6c6155b5ef98369:
  fwd = 4*b*s^2*heads*d / 2 when causal, fwd+bwd = 3.5 x fwd), as in the FlashAttention-2
  paper (Dao 2023, arXiv:2307.08691, section 4.1).
* ``adamw``: one ``torch.optim.AdamW`` step (``fused=True`` / ``foreach=True``; and
  bitsandbytes ``AdamW8bit`` where it is installed) over 1e8, 3e8,
  1e9 parameters in 16.8M-element tensors, parameters/gradients/states in bf16 or fp32;
  nanoseconds per parameter, and GB/s counting 7 tensor accesses per parameter (read p, g,
  m, v; write p, m, v).

Timing: CUDA events around each iteration, warm-up iterations first, the median of N (N shrinks
so that one case stays under ``--case-cap-s``). ``--budget-s`` is checked before every case;
once spent, every remaining case is written as a ``skipped`` row with the reason.

Outputs (``--out``, default ``$OUT`` or /tmp/fmest_gpu_out): ``microbench_<gpu>.csv``, one row
per case, written as each case ends (a killed run keeps its rows), and
``microbench_<gpu>.json``, a summary. ``<gpu>`` is the fmest GPU table name
(``core/fmest/data/gpus.csv`` aliases) when the device name matches one, else the device name.
The helpers here (environment, presets, budget, timing) are shared with ``memory_probe.py``.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
PRESETS = REPO / "core" / "fmest" / "models" / "presets"
GPU_TABLE = REPO / "core" / "fmest" / "data" / "gpus.csv"
DEFAULT_PRESETS = ("qwen2.5-0.5b", "llama-3.2-1b", "qwen2.5-3b", "llama-3.1-8b")
OPTIONAL_PACKAGES = ("transformers", "peft", "bitsandbytes", "flash_attn", "transformer_engine",
                     "pynvml", "accelerate")

CSV_FIELDS = ("kind", "case", "shape", "m", "n", "k", "dtype", "backend", "pass", "median_ms",
              "min_ms", "n_iter", "flops", "bytes", "tflops", "gb_per_s", "ns_per_param",
              "us_per_launch", "status", "reason", "gpu", "gpu_table", "torch", "cuda", "date")


# ---------------------------------------------------------------------------- shared helpers

def out_dir(arg: str | None) -> Path:
    path = Path(arg or os.environ.get("OUT") or "/tmp/fmest_gpu_out")
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_preset(name: str) -> dict:
    """The preset file ``core/fmest/models/presets/<name>.json`` (``name``, ``config``, ...)."""
    path = PRESETS / f"{name}.json"
    if not path.is_file():
        known = sorted(p.stem for p in PRESETS.glob("*.json"))
        raise SystemExit(f"--presets: no preset {name!r} in {PRESETS} (known: {', '.join(known)})")
    return json.loads(path.read_text(encoding="utf-8"))


def gpu_table_row(device_name: str) -> dict | None:
    """The row of fmest's GPU table whose name or alias equals ``device_name`` (case-blind)."""
    if not GPU_TABLE.is_file():
        return None
    lines = [ln for ln in GPU_TABLE.read_text(encoding="utf-8").splitlines()
             if ln and not ln.startswith("#")]
    want = device_name.strip().lower()
    for row in csv.DictReader(lines):
        names = [row["name"]] + [a for a in (row.get("aliases") or "").split("|") if a]
        if want in (n.strip().lower() for n in names):
            return row
    return None


def device_label(device: torch.device) -> tuple[str, str, dict | None]:
    """(raw device name, file-safe label, fmest GPU table row or None)."""
    if device.type != "cuda":
        return "cpu", "cpu", None
    raw = torch.cuda.get_device_name(device)
    row = gpu_table_row(raw)
    label = row["name"] if row else re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-")
    return raw, label, row


#: module -> distribution names to ask importlib.metadata (no import: fast, no side effects)
_DISTS = {"transformers": ("transformers",), "peft": ("peft",),
          "bitsandbytes": ("bitsandbytes",), "flash_attn": ("flash-attn", "flash_attn"),
          "transformer_engine": ("transformer-engine", "transformer_engine"),
          "pynvml": ("nvidia-ml-py", "pynvml"), "accelerate": ("accelerate",)}


def package_versions() -> dict:
    """Version of each optional package, or ``absent: <reason>`` (recorded, never fatal). Read
    from the installed metadata without importing; a package that is installed but fails to
    import is caught where it is used and recorded as that case's error."""
    from importlib import metadata, util
    out = {}
    for name in OPTIONAL_PACKAGES:
        if util.find_spec(name) is None:
            out[name] = f"absent: no module named {name!r}"
            continue
        version = "present (version unknown)"
        for dist in _DISTS.get(name, (name,)):
            try:
                version = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
        out[name] = version
    return out


def driver_version() -> str:
    try:
        res = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return res.stdout.strip().splitlines()[0] if res.returncode == 0 and res.stdout else ""
    except (OSError, subprocess.SubprocessError, IndexError):
        return ""


def env_info(device: torch.device) -> dict:
    raw, label, row = device_label(device)
    info = {
        "gpu": raw, "gpu_table": row["name"] if row else "", "label": label,
        "torch": torch.__version__, "cuda": torch.version.cuda or "",
        "cudnn": str(torch.backends.cudnn.version() or ""), "python": sys.version.split()[0],
        "date": datetime.date.today().isoformat(), "packages": package_versions(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(capability=f"{props.major}.{props.minor}",
                    total_memory_bytes=props.total_memory, sm_count=props.multi_processor_count,
                    driver=driver_version())
    if row:
        info["table_peaks"] = {k: row.get(k, "") for k in
                               ("bf16_tflops", "fp8_tflops", "hbm_tb_per_s", "memory_gib")}
    return info


class Budget:
    """Seconds left of ``--budget-s``; ``spent()`` is checked before each case."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def spent(self, need: float = 0.0) -> bool:
        return self.left() <= need

    def reason(self) -> str:
        return f"budget: --budget-s {self.seconds:g} spent after {self.elapsed():.1f} s"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_fn(fn, device: torch.device, *, warmup: int, repeats: int, case_cap_s: float,
            before=None) -> list[float]:
    """Milliseconds of each timed call of ``fn`` (CUDA events on a GPU, perf_counter on CPU).
    ``before`` runs outside the timed region before each call (e.g. an L2 flush). The number of
    timed calls shrinks so that the case stays near ``case_cap_s``."""
    t0 = time.perf_counter()
    for _ in range(max(1, warmup)):
        if before:
            before()
        fn()
    sync(device)
    per_call = (time.perf_counter() - t0) / max(1, warmup)
    n = max(3, min(repeats, int(case_cap_s / max(per_call, 1e-6))))
    times = []
    if device.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            if before:
                before()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize(device)
        times = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
    else:
        for _ in range(n):
            if before:
                before()
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    return times


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def free_memory(device: torch.device) -> None:
    import gc
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


class RowWriter:
    """CSV rows written and flushed one by one (a run killed by a timeout keeps its rows)."""

    def __init__(self, path: Path, fields):
        self.path = path
        self.fields = list(fields)
        self.fh = open(path, "w", newline="", encoding="utf-8")
        self.writer = csv.DictWriter(self.fh, fieldnames=self.fields, extrasaction="raise")
        self.writer.writeheader()
        self.fh.flush()
        self.rows: list[dict] = []

    def write(self, row: dict) -> None:
        full = {f: row.get(f, "") for f in self.fields}
        unknown = set(row) - set(self.fields)
        if unknown:
            raise KeyError(f"row fields not in the CSV layout: {sorted(unknown)}")
        self.writer.writerow(full)
        self.fh.flush()
        self.rows.append(full)

    def close(self) -> None:
        self.fh.close()


# ---------------------------------------------------------------------------- the cases

def _fmt(x, digits=4):
    if x is None or x == "":
        return ""
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return x


class Bench:
    def __init__(self, args, device: torch.device, env: dict, writer: RowWriter):
        self.args = args
        self.device = device
        self.env = env
        self.writer = writer
        self.budget = Budget(args.budget_s)
        self.common = {"gpu": env["gpu"], "gpu_table": env["gpu_table"], "torch": env["torch"],
                       "cuda": env["cuda"], "date": env["date"]}
        self.l2 = None
        if device.type == "cuda":
            # mamf-finder: 256 MiB zeroed between iterations to evict the L2 cache
            self.l2 = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device=device)

    def flush_l2(self):
        if self.l2 is not None:
            self.l2.zero_()

    def row(self, **kw):
        kw = {k: _fmt(v) for k, v in kw.items()}
        self.writer.write({**self.common, **kw})
        status = kw.get("status", "")
        what = " ".join(str(kw.get(k, "")) for k in ("kind", "case", "shape", "dtype", "backend",
                                                     "pass") if kw.get(k, ""))
        value = kw.get("tflops") or kw.get("gb_per_s") or kw.get("us_per_launch") or ""
        unit = ("TFLOP/s" if kw.get("tflops") else "GB/s" if kw.get("gb_per_s") else
                "us/launch" if kw.get("us_per_launch") else "")
        extra = f"{kw.get('median_ms', '')} ms {value} {unit}" if status == "ok" else kw.get(
            "reason", "")
        print(f"[microbench {self.budget.elapsed():6.1f}s] {status:7s} {what}: {extra}",
              flush=True)

    def run_case(self, meta: dict, setup, *, flops=None, nbytes=None, params=None,
                 launches=None, before=None):
        """Budget check, set-up, time, one row. ``setup()`` returns the callable to time."""
        if self.budget.spent():
            self.row(**meta, status="skipped", reason=self.budget.reason())
            return None
        fn = None
        try:
            fn = setup()
            times = time_fn(fn, self.device, warmup=self.args.warmup, repeats=self.args.repeats,
                            case_cap_s=self.args.case_cap_s, before=before)
        except Exception as exc:  # noqa: BLE001 - one failing case must not end the run
            status = "oom" if is_oom(exc) else "error"
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            del exc
            fn = None
            free_memory(self.device)
            self.row(**meta, status=status, reason=reason)
            return None
        med = statistics.median(times)
        sec = med / 1e3
        out = dict(meta, median_ms=med, min_ms=min(times), n_iter=len(times), status="ok")
        if flops:
            out.update(flops=int(flops), tflops=flops / sec / 1e12)
        if nbytes:
            out.update(bytes=int(nbytes), gb_per_s=nbytes / sec / 1e9)
        if params:
            out.update(ns_per_param=sec / params * 1e9)
        if launches:
            out.update(us_per_launch=sec / launches * 1e6)
        self.row(**out)
        fn = None
        free_memory(self.device)
        return out

    # -- launch overhead
    def launch(self):
        n = 200 if self.args.tiny else 2000
        x = torch.zeros(1, device=self.device)

        def add_loop():
            for _ in range(n):
                x.add_(1)
        # wall-clock style: one timed call holds n launches; per-launch = median / n
        self.run_case(dict(kind="launch", case="add_1elem", shape=f"loop{n}", dtype="fp32",
                           backend="eager"), lambda: add_loop, launches=n)
        if self.device.type == "cuda" and hasattr(torch.cuda, "_sleep"):
            def sleep_loop():
                for _ in range(n):
                    torch.cuda._sleep(0)
            self.run_case(dict(kind="launch", case="cuda_sleep0", shape=f"loop{n}", dtype="",
                               backend="eager"), lambda: sleep_loop, launches=n)
        else:
            self.row(kind="launch", case="cuda_sleep0", shape=f"loop{n}", status="skipped",
                     reason="no CUDA device (torch.cuda._sleep needs one)")

    # -- HBM bandwidth
    def hbm(self):
        nbytes = (4 * 2**20) if self.args.tiny else (1 << 30)
        n = nbytes // 4
        state = {}

        def setup_copy():
            state["a"] = torch.empty(n, dtype=torch.float32, device=self.device)
            state["b"] = torch.rand(n, dtype=torch.float32, device=self.device)
            return lambda: state["a"].copy_(state["b"])

        def setup_triad():
            state["c"] = torch.rand(n, dtype=torch.float32, device=self.device)
            return lambda: torch.add(state["b"], state["c"], alpha=3.0, out=state["a"])
        shape = f"{n} fp32 ({nbytes / 2**30:.3g} GiB per array)"
        self.run_case(dict(kind="hbm", case="copy", shape=shape, dtype="fp32", backend="torch"),
                      setup_copy, nbytes=2 * nbytes)
        self.run_case(dict(kind="hbm", case="triad", shape=shape, dtype="fp32", backend="torch"),
                      setup_triad, nbytes=3 * nbytes)
        state.clear()

    # -- GEMMs
    def _gemm_case(self, meta, m, n, k, dtype, layout):
        """One GEMM with output (m, n) and reduction k. ``layout``: fwd / dgrad / wgrad /
        square (mamf), or fp8 (torch._scaled_mm)."""
        dev = self.device
        st = {}

        def setup():
            if layout == "fp8":
                a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
                b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
                one = torch.ones((), device=dev, dtype=torch.float32)
                st.update(a=a, b=b, one=one)
                return lambda: torch._scaled_mm(st["a"], st["b"], st["one"], st["one"],
                                                out_dtype=torch.bfloat16)
            if layout in ("fwd", "square"):    # Y[m,n] = X[m,k] @ W[n,k]^T
                a = torch.randn(m, k, device=dev, dtype=dtype)
                b = torch.randn(n, k, device=dev, dtype=dtype).t()
            elif layout == "dgrad":            # dX[m,n=K] = dY[m,k=N] @ W[k=N, n=K]
                a = torch.randn(m, k, device=dev, dtype=dtype)
                b = torch.randn(k, n, device=dev, dtype=dtype)
            else:                              # wgrad: dW[m=N,n=K] = dY[T,N]^T @ X[T,K]
                a = torch.randn(k, m, device=dev, dtype=dtype).t()
                b = torch.randn(k, n, device=dev, dtype=dtype)
            c = torch.empty(m, n, device=dev, dtype=dtype)
            st.update(a=a, b=b, c=c)
            return lambda: torch.mm(st["a"], st["b"], out=st["c"])
        res = self.run_case(dict(meta, m=m, n=n, k=k), setup, flops=2.0 * m * n * k,
                            before=self.flush_l2)
        st.clear()
        return res

    def fp8_reason(self) -> str:
        if self.device.type != "cuda":
            return "no CUDA device"
        if not (hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm")):
            return f"torch {torch.__version__} lacks float8_e4m3fn/_scaled_mm"
        cap = torch.cuda.get_device_capability(self.device)
        if cap < (8, 9):
            return f"compute capability {cap[0]}.{cap[1]} < 8.9 has no fp8 tensor cores"
        return ""

    def mamf(self):
        sizes = (128, 256) if self.args.tiny else (2048, 4096, 6144, 8192, 10240, 12288, 16384)
        if self.device.type == "cuda" and not self.args.tiny and not self.budget.spent():
            # short accelerator warm-up (mamf-finder uses 30 s; budget)
            a = torch.randn(8192, 8192, device=self.device, dtype=torch.bfloat16)
            t_end = time.monotonic() + min(5.0, max(0.0, self.budget.left() / 20))
            while time.monotonic() < t_end:
                for _ in range(10):
                    a @ a
                sync(self.device)
            del a
        fp8 = self.fp8_reason()
        for dt_name, dtype in (("bf16", torch.bfloat16), ("fp8", None)):
            for s in sizes:
                meta = dict(kind="mamf", case="square", shape=f"{s}x{s}x{s}", dtype=dt_name,
                            backend="torch.mm" if dtype else "torch._scaled_mm", **{"pass": "fwd"})
                if dtype is None and fp8:
                    self.row(**meta, m=s, n=s, k=s, status="skipped", reason=f"fp8: {fp8}")
                    continue
                self._gemm_case(meta, s, s, s, dtype, "square" if dtype else "fp8")

    def sustained(self):
        """``sustained`` rows (module doc): burst vs power-limited GEMM rate."""
        s = 128 if self.args.tiny else 8192
        seconds = 0.05 if self.args.tiny else self.args.sustained_s
        fp8 = self.fp8_reason()
        for dt_name in ("bf16", "fp8"):
            meta = dict(kind="sustained", case="back_to_back", shape=f"{s}x{s}x{s}", m=s, n=s,
                        k=s, dtype=dt_name, backend="torch.mm" if dt_name == "bf16"
                        else "torch._scaled_mm", **{"pass": "fwd"})
            if dt_name == "fp8" and fp8:
                self.row(**meta, status="skipped", reason=f"fp8: {fp8}")
                continue
            if self.budget.spent(seconds + 1.0):
                self.row(**meta, status="skipped", reason=self.budget.reason())
                continue
            try:
                out = self._sustained_case(meta, s, dt_name, seconds)
            except Exception as exc:  # noqa: BLE001 - one failing case must not end the run
                status = "oom" if is_oom(exc) else "error"
                self.row(**meta, status=status, reason=f"{type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:200] if str(exc) else ''}")
                free_memory(self.device)
                continue
            self.row(**out)
            free_memory(self.device)

    def _sustained_case(self, meta: dict, s: int, dt_name: str, seconds: float) -> dict:
        dev = self.device
        if dt_name == "fp8":
            a = torch.randn(s, s, device=dev).to(torch.float8_e4m3fn)
            b = torch.randn(s, s, device=dev).to(torch.float8_e4m3fn).t()
            one = torch.ones((), device=dev, dtype=torch.float32)

            def fn():
                return torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)
        else:
            a = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
            b = torch.randn(s, s, device=dev, dtype=torch.bfloat16).t()
            c = torch.empty(s, s, device=dev, dtype=torch.bfloat16)

            def fn():
                return torch.mm(a, b, out=c)
        fn()
        sync(dev)
        times: list[float] = []
        end = time.perf_counter() + seconds
        if dev.type == "cuda":
            events = []
            while time.perf_counter() < end:   # the host stays ahead; the queue paces it
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                fn()
                e1.record()
                events.append((e0, e1))
            torch.cuda.synchronize(dev)
            times = [e0.elapsed_time(e1) for e0, e1 in events]
        else:
            while time.perf_counter() < end or len(times) < 3:
                t = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t) * 1e3)
        flops = 2.0 * s ** 3
        starts, acc = [], 0.0
        for t in times:
            starts.append(acc)
            acc += t
        first = [t for t, st in zip(times, starts, strict=True) if st < 50.0] or times[:1]
        last = [t for t, st in zip(times, starts, strict=True) if st >= acc / 2] or times[-1:]
        burst, held = statistics.median(first), statistics.median(last)
        return dict(meta, median_ms=held, min_ms=min(times), n_iter=len(times), status="ok",
                    flops=int(flops), tflops=flops / (held / 1e3) / 1e12,
                    reason=f"first 50 ms: median {burst:.4g} ms = "
                           f"{flops / (burst / 1e3) / 1e12:.1f} TFLOP/s over {len(first)} "
                           f"iterations; last {acc / 2e3:.2f} s: {len(last)} iterations")

    def tf32(self):
        """fp32 GEMMs with TF32 tensor cores on (``torch.backends.cuda.matmul.allow_tf32``,
        what ``torch.set_float32_matmul_precision("high")`` sets) and off: the rate fmest should
        give fp32 matmuls (its time model has no TF32 row measured yet). Square sizes as in
        ``mamf`` (B transposed, L2 flushed)."""
        sizes = (128,) if self.args.tiny else (4096, 8192)
        old = torch.backends.cuda.matmul.allow_tf32 if self.device.type == "cuda" else None
        try:
            for tf32_on in (True, False):
                for s in sizes if tf32_on else sizes[:1]:
                    meta = dict(kind="tf32", case="square", shape=f"{s}x{s}x{s}",
                                dtype="tf32" if tf32_on else "fp32", backend="torch.mm",
                                **{"pass": "fwd"})
                    if self.device.type == "cuda":
                        torch.backends.cuda.matmul.allow_tf32 = tf32_on
                    self._gemm_case(meta, s, s, s, torch.float32, "square")
        finally:
            if old is not None:
                torch.backends.cuda.matmul.allow_tf32 = old

    def cpu_adamw(self):
        """``torch.optim.AdamW`` on the host CPU (fp32 parameters, fused and foreach) over all
        its threads: the rate of an optimizer step offloaded to CPU memory, beside fmest's
        ``CPU_ADAM_PARAMS_PER_S`` (DeepSpeed's CPUAdam is an AVX C++ op, not timed here; this
        is PyTorch's own kernel on the same host)."""
        n = 20_000 if self.args.tiny else 100_000_000
        chunk = 2**12 if self.args.tiny else 2**24
        cpu = torch.device("cpu")
        threads = torch.get_num_threads()
        model = ""
        try:
            for line in open("/proc/cpuinfo", encoding="utf-8"):
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        for impl in ("fused", "foreach"):
            meta = dict(kind="cpu_adamw", case=f"AdamW({impl}=True) on CPU",
                        shape=f"{n} params, {threads} threads, {model or 'cpu'}"[:120],
                        dtype="fp32", backend=impl)
            st = {}

            def setup(impl=impl, st=st):
                sizes_ = [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])
                ps = [torch.nn.Parameter(torch.randn(c, device=cpu)) for c in sizes_]
                for p in ps:
                    p.grad = torch.randn_like(p)
                opt = torch.optim.AdamW(ps, lr=1e-4, **{impl: True})
                opt.step()
                st.update(ps=ps, opt=opt)
                return opt.step
            dev, self.device = self.device, cpu   # time on the host clock
            try:
                self.run_case(meta, setup, params=n, nbytes=7 * 4 * n)
            finally:
                self.device = dev
            st.clear()

    def preset_layers(self, name: str) -> list[tuple[str, int, int]]:
        """(layer, out features N, in features K) of one transformer block + the LM head."""
        cfg = load_preset(name)["config"]
        h = cfg["hidden_size"]
        heads = cfg["num_attention_heads"]
        kv = cfg.get("num_key_value_heads") or heads
        hd = cfg.get("head_dim") or h // heads
        inter = cfg["intermediate_size"]
        vocab = cfg["vocab_size"]
        if self.args.tiny:   # same ratios, 1/8 of the widths, multiples of 16
            def r(x):
                return max(16, (x // 8) // 16 * 16)
            h, inter, vocab, hd = r(h), r(inter), r(vocab), max(16, hd // 4)
        return [("qkv", (heads + 2 * kv) * hd, h), ("o", h, heads * hd),
                ("gate_up", 2 * inter, h), ("down", h, inter), ("lm_head", vocab, h)]

    def gemm(self):
        tokens = (64,) if self.args.tiny else (4096, 16384)
        presets = self.args.presets[:1] if self.args.tiny else self.args.presets
        fp8 = self.fp8_reason()
        for name in presets:
            for t in tokens:
                for layer, n_out, k_in in self.preset_layers(name):
                    for layout in ("fwd", "dgrad", "wgrad"):
                        # output (m, n) and reduction k of each training GEMM
                        m, n, k = {"fwd": (t, n_out, k_in), "dgrad": (t, k_in, n_out),
                                   "wgrad": (n_out, k_in, t)}[layout]
                        meta = dict(kind="gemm", case=f"{name}:{layer}",
                                    shape=f"T={t} N={n_out} K={k_in}", dtype="bf16",
                                    backend="torch.mm", **{"pass": layout})
                        self._gemm_case(meta, m, n, k, torch.bfloat16, layout)
                    meta = dict(kind="gemm", case=f"{name}:{layer}",
                                shape=f"T={t} N={n_out} K={k_in}", dtype="fp8",
                                backend="torch._scaled_mm", **{"pass": "fwd"})
                    if fp8:
                        self.row(**meta, m=t, n=n_out, k=k_in, status="skipped",
                                 reason=f"fp8: {fp8}")
                    else:
                        self._gemm_case(meta, t, n_out, k_in, None, "fp8")

    # -- alignment: the same GEMM with its dimensions on and off 16-byte multiples
    def align(self):
        """Eager attention's batched GEMMs (Megatron ``baddbmm`` Q K^T and ``bmm`` P V, one
        matrix per head) by head dim, and a linear GEMM by its reduction size, each on and off
        the multiples of 8 bf16 elements (16 bytes) tensor-core GEMMs want (NVIDIA "Matrix
        Multiplication Background User's Guide" §2.2): e.g. hidden 14400 at TP 8 gives head dim
        150 (96 heads) or 450 (32 heads) and per-rank width 1800, hidden 13824 gives 144 and
        1728. Rows: kind ``align``, case ``qk``/``pv``/``linear``, the TFLOP/s at each size."""
        seq = 128 if self.args.tiny else 2048
        batches = 4 if self.args.tiny else 96       # micro-batch x heads per rank
        head_dims = (16, 18, 24) if self.args.tiny else (128, 144, 150, 224, 450, 456)
        for hd in head_dims:
            for case in ("qk", "pv"):
                meta = dict(kind="align", case=case,
                            shape=f"batch={batches} s={seq} head_dim={hd}", dtype="bf16",
                            backend="torch.bmm", **{"pass": "fwd"})
                st = {}

                def setup(hd=hd, case=case, st=st):
                    q = torch.randn(batches, seq, hd, device=self.device, dtype=torch.bfloat16)
                    if case == "qk":    # [b, s, d] @ [b, d, s] -> [b, s, s]
                        k = torch.randn(batches, hd, seq, device=self.device,
                                        dtype=torch.bfloat16)
                    else:               # [b, s, s] @ [b, s, d] -> [b, s, d]
                        q = torch.randn(batches, seq, seq, device=self.device,
                                        dtype=torch.bfloat16)
                        k = torch.randn(batches, seq, hd, device=self.device,
                                        dtype=torch.bfloat16)
                    st.update(a=q, b=k)
                    return lambda: torch.bmm(st["a"], st["b"])
                self.run_case(dict(meta, m=seq, n=seq if case == "qk" else hd,
                                   k=hd if case == "qk" else seq), setup,
                              flops=2.0 * batches * seq * seq * hd, before=self.flush_l2)
                st.clear()
        tokens = 64 if self.args.tiny else 8192
        out_features = 256 if self.args.tiny else 14336
        for k_in in ((128, 136, 130) if self.args.tiny else (1728, 1792, 1800, 1796)):
            meta = dict(kind="align", case="linear", shape=f"T={tokens} N={out_features} "
                        f"K={k_in}", dtype="bf16", backend="torch.mm", **{"pass": "fwd"})
            self._gemm_case(meta, tokens, out_features, k_in, torch.bfloat16, "fwd")

    # -- attention
    def attention(self):
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        seqs = (64, 128) if self.args.tiny else (512, 1024, 2048, 4096, 8192, 16384)
        total = 128 if self.args.tiny else 16384
        dim = 256 if self.args.tiny else 2048
        dtype = torch.bfloat16
        backends = (("flash", SDPBackend.FLASH_ATTENTION),
                    ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                    ("math", SDPBackend.MATH),
                    # cuDNN fused attention, and no forced backend: what SDPA picks by itself
                    # (PyTorch >= 2.x on sm90/sm100 with cuDNN > 9.15 puts cuDNN first,
                    # aten/src/ATen/native/transformers/cuda/sdp_utils.cpp
                    # check_prefer_cudnn_attention; fmest's time model reads sdpa as FA2)
                    ("cudnn", getattr(SDPBackend, "CUDNN_ATTENTION", None)),
                    ("default", None))
        for bname, backend in backends:
            extra = bname in ("cudnn", "default")
            for d in ((128,) if extra and not self.args.tiny else (64, 128)):
                for s in (tuple(x for x in seqs if x in (2048, 8192, 16384)) or seqs
                          if extra else seqs):
                    b = max(1, total // s)
                    heads = dim // d
                    fwd = 4 * b * s * s * heads * d / 2   # causal: half (FA benchmark flops())
                    base = dict(kind="attention", case="sdpa_causal",
                                shape=f"b={b} s={s} heads={heads} d={d}", dtype="bf16",
                                backend=bname)
                    if bname in ("efficient", "cudnn") and (self.device.type != "cuda"
                                                            or backend is None and bname != "default"):
                        for p in ("fwd", "fwd+bwd"):
                            self.row(**base, **{"pass": p}, status="skipped",
                                     reason=f"the {bname} SDPA backend needs CUDA (and a torch "
                                            "that has it)")
                        continue
                    if bname == "default":
                        base["case"] = f"sdpa_causal picks {self._sdpa_choice(b, heads, s, d, dtype)}"
                    if bname == "math" and s > self.args.math_max_seq:
                        for p in ("fwd", "fwd+bwd"):
                            self.row(**base, **{"pass": p}, status="skipped",
                                     reason=f"math backend above --math-max-seq "
                                            f"{self.args.math_max_seq} (materialises b*heads*s^2 "
                                            "scores; budget)")
                        continue
                    st = {}

                    def setup(b=b, s=s, heads=heads, d=d, backend=backend, st=st):
                        q, k, v = (torch.randn(b, heads, s, d, device=self.device, dtype=dtype,
                                               requires_grad=True) for _ in range(3))
                        st.update(q=q, k=k, v=v, dout=torch.randn_like(q))

                        def f(st=st):
                            if backend is None:      # SDPA's own choice
                                return F.scaled_dot_product_attention(st["q"], st["k"], st["v"],
                                                                      is_causal=True)
                            with sdpa_kernel([backend]):
                                return F.scaled_dot_product_attention(st["q"], st["k"], st["v"],
                                                                      is_causal=True)
                        st["f"] = f
                        return f

                    def setup_fb(setup=setup, st=st):
                        f = setup()

                        def fb(st=st):
                            out = f()
                            torch.autograd.grad(out, (st["q"], st["k"], st["v"]), st["dout"])
                        return fb
                    self.run_case(dict(base, **{"pass": "fwd"}), setup, flops=fwd)
                    st.clear()
                    self.run_case(dict(base, **{"pass": "fwd+bwd"}), setup_fb, flops=3.5 * fwd)
                    st.clear()

    def _sdpa_choice(self, b: int, heads: int, s: int, d: int, dtype) -> str:
        """The backend ``F.scaled_dot_product_attention`` picks for these shapes with no
        backend forced (``torch._fused_sdp_choice``, the dispatcher's own call; ``unknown``
        where this torch has no such function)."""
        from torch.nn.attention import SDPBackend
        choose = getattr(torch, "_fused_sdp_choice", None)
        if choose is None:
            return "unknown"
        q = torch.empty(b, heads, s, d, device=self.device, dtype=dtype, requires_grad=True)
        try:
            picked = choose(q, q, q, None, 0.0, True)
        except Exception:     # noqa: BLE001 - a torch without this signature
            return "unknown"
        names = {int(v): n.lower() for n, v in SDPBackend.__members__.items()}
        return names.get(int(picked), str(picked))

    # -- optimizer step
    def adamw(self):
        sizes = (20_000,) if self.args.tiny else (100_000_000, 300_000_000, 1_000_000_000)
        chunk = 2**12 if self.args.tiny else 2**24
        for dt_name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
            for impl in ("fused", "foreach"):
                for n in sizes:
                    meta = dict(kind="adamw", case=f"AdamW({impl}=True)", shape=f"{n} params",
                                dtype=dt_name, backend=impl)
                    if impl == "fused" and self.device.type == "cpu" and \
                            tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 4):
                        self.row(**meta, status="skipped", reason="fused AdamW on CPU needs torch "
                                 ">= 2.4")
                        continue
                    st = {}

                    def setup(n=n, dtype=dtype, impl=impl, st=st):
                        sizes_ = [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])
                        ps = [torch.nn.Parameter(torch.randn(c, device=self.device, dtype=dtype))
                              for c in sizes_]
                        for p in ps:
                            p.grad = torch.randn_like(p)
                        opt = torch.optim.AdamW(ps, lr=1e-4, **{impl: True})
                        opt.step()    # allocates the states
                        st.update(ps=ps, opt=opt)
                        return opt.step
                    elem = 2 if dtype == torch.bfloat16 else 4
                    self.run_case(meta, setup, params=n, nbytes=7 * elem * n)
                    st.clear()
        self.adamw_8bit(sizes, chunk)

    def adamw_8bit(self, sizes, chunk):
        """bitsandbytes ``AdamW8bit`` (block-wise 8-bit states) over bf16 parameters: the
        optimizer of the probe's ``adamw_8bit`` cases, whose step is not a bandwidth figure
        (the states are quantized with a per-block absmax and a 256-entry code map); bytes
        counted as read p, g (2 each), m, v (1 each), write p (2), m, v (1 each) = 10 per
        parameter. Skipped with the reason without bitsandbytes or a GPU."""
        try:
            import bitsandbytes as bnb
        except Exception as exc:   # ImportError, or a CUDA setup error inside the import
            bnb, why = None, f"bitsandbytes absent ({type(exc).__name__}: {exc})"[:160]
        for n in sizes:
            meta = dict(kind="adamw", case="AdamW8bit (bitsandbytes)", shape=f"{n} params",
                        dtype="bf16", backend="bnb8bit")
            if self.budget.spent():
                self.row(**meta, status="skipped", reason=self.budget.reason())
                continue
            if bnb is None or self.device.type != "cuda":
                self.row(**meta, status="skipped",
                         reason=why if bnb is None else "bitsandbytes 8-bit states need CUDA")
                continue
            st = {}

            def setup(n=n, st=st):
                sizes_ = [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])
                ps = [torch.nn.Parameter(torch.randn(c, device=self.device, dtype=torch.bfloat16))
                      for c in sizes_]
                for p in ps:
                    p.grad = torch.randn_like(p)
                opt = bnb.optim.AdamW8bit(ps, lr=1e-4)
                opt.step()    # allocates the states
                st.update(ps=ps, opt=opt)
                return opt.step
            self.run_case(meta, setup, params=n, nbytes=10 * n)
            st.clear()


def summarise(rows: list[dict], env: dict, budget: Budget, args) -> dict:
    def num(r, k):
        try:
            return float(r[k])
        except (TypeError, ValueError):
            return None
    ok = [r for r in rows if r["status"] == "ok"]
    summary: dict = {"env": env, "budget_s": args.budget_s, "elapsed_s": round(budget.elapsed(), 1),
                     "tiny": args.tiny, "device": args.device,
                     "status_counts": {}, "not_ok_reasons": sorted({r["reason"] for r in rows
                                                                     if r["status"] != "ok"})}
    for r in rows:
        summary["status_counts"][r["status"]] = summary["status_counts"].get(r["status"], 0) + 1
    for dt in ("bf16", "fp8"):
        sq = [r for r in ok if r["kind"] == "mamf" and r["dtype"] == dt]
        if sq:
            best = max(sq, key=lambda r: num(r, "tflops"))
            summary[f"mamf_{dt}_tflops"] = num(best, "tflops")
            summary[f"mamf_{dt}_shape"] = best["shape"]
            peak = (env.get("table_peaks") or {}).get(f"{dt}_tflops")
            if peak:
                summary[f"mamf_{dt}_fraction_of_table_peak"] = num(best, "tflops") / float(peak)
    # per preset and token count: time-weighted achieved TFLOP/s over every layer GEMM
    gemm: dict = {}
    for r in ok:
        if r["kind"] != "gemm":
            continue
        name = r["case"].split(":")[0]
        tok = r["shape"].split()[0]
        key = f"{name} {tok} {r['dtype']}"
        g = gemm.setdefault(key, {"flops": 0.0, "ms": 0.0, "gemms": 0})
        g["flops"] += num(r, "flops")
        g["ms"] += num(r, "median_ms")
        g["gemms"] += 1
    summary["gemm_time_weighted_tflops"] = {k: float(f'{v["flops"] / (v["ms"] / 1e3) / 1e12:.4g}')
                                            for k, v in gemm.items() if v["ms"] > 0}
    att: dict = {}
    for r in ok:
        if r["kind"] == "attention":
            att[f"{r['backend']} {r['pass']} {r['shape']}"] = num(r, "tflops")
    summary["attention_tflops"] = att
    for r in ok:
        if r["kind"] == "hbm":
            summary[f"hbm_{r['case']}_gb_per_s"] = num(r, "gb_per_s")
            peak = (env.get("table_peaks") or {}).get("hbm_tb_per_s")
            if peak:
                summary[f"hbm_{r['case']}_fraction_of_table_peak"] = \
                    num(r, "gb_per_s") / (float(peak) * 1e3)
        if r["kind"] == "adamw":
            summary.setdefault("adamw_ns_per_param", {})[
                f"{r['dtype']} {r['backend']} {r['shape']}"] = num(r, "ns_per_param")
        if r["kind"] == "tf32":
            summary.setdefault("tf32_tflops", {})[f"{r['dtype']} {r['shape']}"] = num(r, "tflops")
        if r["kind"] == "cpu_adamw":
            summary.setdefault("cpu_adamw_params_per_s", {})[
                f"{r['backend']} {r['shape']}"] = 1e9 / num(r, "ns_per_param")
        if r["kind"] == "launch":
            summary[f"launch_{r['case']}_us"] = num(r, "us_per_launch")
        if r["kind"] == "sustained":
            summary[f"sustained_{r['dtype']}_tflops"] = num(r, "tflops")
            peak = (env.get("table_peaks") or {}).get(f"{r['dtype']}_tflops")
            if peak:
                summary[f"sustained_{r['dtype']}_fraction_of_table_peak"] = \
                    num(r, "tflops") / float(peak)
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (CPU smoke test)")
    ap.add_argument("--budget-s", type=float, default=280.0,
                    help="wall-clock budget; cases after it are recorded as skipped")
    ap.add_argument("--out", default=None, help="output folder (default $OUT or /tmp/fmest_gpu_out)")
    ap.add_argument("--presets", nargs="+", default=list(DEFAULT_PRESETS))
    ap.add_argument("--kinds", nargs="+", default=["launch", "hbm", "mamf", "sustained", "tf32",
                                                   "gemm", "align", "attention", "adamw",
                                                   "cpu_adamw"],
                    choices=["launch", "hbm", "mamf", "sustained", "tf32", "gemm", "align",
                             "attention", "adamw", "cpu_adamw"])
    ap.add_argument("--sustained-s", type=float, default=4.0,
                    help="seconds of back-to-back GEMMs per dtype in the sustained case")
    ap.add_argument("--warmup", type=int, default=None, help="default 3 (--tiny: 1)")
    ap.add_argument("--repeats", type=int, default=None, help="default 20 (--tiny: 3)")
    ap.add_argument("--case-cap-s", type=float, default=None,
                    help="shrink the timed iterations so one case takes about this long "
                         "(default 1.5; --tiny: 0.02)")
    ap.add_argument("--math-max-seq", type=int, default=8192)
    args = ap.parse_args(argv)
    for key, full, tiny in (("warmup", 3, 1), ("repeats", 20, 3), ("case_cap_s", 1.5, 0.02)):
        if getattr(args, key) is None:
            setattr(args, key, tiny if args.tiny else full)
    for name in args.presets:
        load_preset(name)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("microbench: --device cuda but torch.cuda.is_available() is False "
              f"(torch {torch.__version__}); use --device cpu --tiny for a smoke run",
              file=sys.stderr)
        return 2
    device = torch.device(args.device)
    env = env_info(device)
    out = out_dir(args.out)
    csv_path = out / f"microbench_{env['label']}.csv"
    writer = RowWriter(csv_path, CSV_FIELDS)
    bench = Bench(args, device, env, writer)
    print(f"microbench on {env['gpu']} ({env['label']}), torch {env['torch']} cuda {env['cuda']}, "
          f"budget {args.budget_s:g} s -> {csv_path}", flush=True)
    try:
        for kind in args.kinds:
            getattr(bench, kind)()
    finally:
        writer.close()
        summary = summarise(writer.rows, env, bench.budget, args)
        json_path = out / f"microbench_{env['label']}.json"
        json_path.write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
        print(f"microbench: {len(writer.rows)} rows {summary['status_counts']} -> {csv_path}, "
              f"{json_path.name} ({bench.budget.elapsed():.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
