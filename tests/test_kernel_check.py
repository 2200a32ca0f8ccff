"""benchmarks/kernel_check.py: fmest's forward+backward GPU time against the CUDA kernel time
fmest's own GPU probe profiled in the same steps (benchmarks/data/parts/gpu_probe_h100.csv)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_full_fine_tuning_kernels_match_the_h100s():
    """At the H100's measured sustained GEMM rate the roofline's full fine-tuning kernels take
    the GPU's measured kernel time within 10 % on every GPU-bound probe case (0.96-1.01 when
    written), and the probe's measured idle share is small beside them."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    kc = _load("fmest_kernel_check", ROOT / "benchmarks" / "kernel_check.py")
    records = kc.compare(kc.probe_rows())
    assert len(records) >= 30
    full = [r for r in records if r["regime"] == "GPU-bound" and r["technique"] == "full"]
    assert len(full) >= 6
    for r in full:
        assert 0.9 <= r["kernel_ratio"] <= 1.1, r["id"]
        assert 0.0 <= r["idle_share"] < 0.25, r["id"]
    summary = {(s["regime"], s["technique"]): s for s in kc.summarise(records)}
    assert summary[("GPU-bound", "full")]["rows"] == len(full)
    # host-bound cases: the GPU idles most of the step
    assert summary[("host-bound", "all")]["idle_share_p50"] > 0.4


def test_kernel_classes_parse_and_classify():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    kc = _load("fmest_kernel_check", ROOT / "benchmarks" / "kernel_check.py")
    assert kc.kernel_classes("a=1; gpu_kernel_classes_s=gemm:0.12/attention:0.03; b") == \
        {"gemm": 0.12, "attention": 0.03}
    assert kc.kernel_classes("no split here") == {}
    probe = _load("fmest_gpu_memory_probe_kc", ROOT / "benchmarks" / "gpu" / "memory_probe.py")
    assert probe.kernel_class("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n") == "gemm"
    assert probe.kernel_class("void flash_fwd_kernel<Flash_fwd_kernel_traits>") == "attention"
    assert probe.kernel_class("void kDequantizeBlockwise<__nv_bfloat16>") == "bnb4bit"
    assert probe.kernel_class("void at::native::(anonymous namespace)::multi_tensor_apply_kernel"
                              "<FusedAdamMathFunctor>") == "optimizer"
    assert probe.kernel_class("void at::native::vectorized_elementwise_kernel<4, "
                              "CUDAFunctor_add>") == "elementwise"
    assert probe.kernel_class("Memcpy DtoD (Device -> Device)") == "copy"
    assert probe.kernel_class("void at::native::reduce_kernel<512, 1>") == "reduction"
