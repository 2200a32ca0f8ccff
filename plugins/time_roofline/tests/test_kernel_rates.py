"""GEMM tile/wave quantization and the published attention-kernel table (issue 20): the
arithmetic by hand, the table lookup and interpolation, and the note of a GPU with no figure."""

from __future__ import annotations

import math

import pytest

from fmest_time_roofline import formulas as F


def test_wave_arithmetic_by_hand():
    # NVIDIA Matrix Multiplication Background guide §3.2: one 256x128 tile per SM, so an A100
    # (108 SMs) runs 108 tiles in a wave; 109 tiles need a second, nearly empty wave.
    assert F.sm_count("A100-SXM-80GB") == 108
    # 108 tiles of 256x128 exactly (m = 256*9, n = 128*12): one full wave
    assert F.gemm_shape_efficiency(256 * 9, 4096, 128 * 12, 108) == pytest.approx(1.0)
    # m = 128: 128x256 tiles, ceil(4096/256) = 16 tiles in one wave of 132 -> 16/132 of the
    # SMs busy; a 64-wide tile doubles the tiles (32 of 132) with no padding, best of all:
    # 64x64 -> 2 * 64 = 128 tiles in one wave -> 128/132
    eff = F.gemm_shape_efficiency(128, 4096, 4096, 132)
    assert eff == pytest.approx(128 / 132)
    # tile quantization alone (no SM count): m = 100 pads to 128 with 128-row tiles, to 128
    # with two 64-row tiles as well -> 100/128
    assert F.gemm_shape_efficiency(100, 4096, 4096, None) == pytest.approx(100 / 128)


def test_wave_efficiency_formula_matches_a_brute_force():
    def brute(m, n, sms):
        best = 0.0
        for tm, tn in F.GEMM_CTA_TILES:
            tiles = math.ceil(m / tm) * math.ceil(n / tn)
            waves = math.ceil(tiles / sms)
            best = max(best, m * n / (waves * sms * tm * tn))
        return best
    for m, n in ((512, 4096), (4096, 11008), (8192, 1024), (3000, 5000), (16, 4096)):
        assert F.gemm_shape_efficiency(m, 1024, n, 132) == pytest.approx(brute(m, n, 132))


@pytest.mark.parametrize("gpu, m, n, k", [
    # ml-engineering compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS comparison
    # table", Best Shape column (MxNxK found by mamf-finder.py): MAMF was measured there, so
    # the model must give those shapes (close to) no quantization loss
    ("A100-SXM-80GB", 6912, 16384, 2048),
    ("H100-SXM-80GB", 6144, 17920, 2816),
    ("A100-PCIE-80GB", 2304, 5120, 1536),
    ("MI300X-192GB", 4096, 10240, 4864),
])
def test_mamf_best_shapes_lose_little_to_quantization(gpu, m, n, k):
    assert F.gemm_shape_efficiency(m, k, n, F.sm_count(gpu)) > 0.98


def test_gpu_without_sm_count_gets_no_wave_term():
    assert F.sm_count("GAUDI2-96GB") is None
    assert F.sm_count("A10G-24GB") is None          # no cited figure: not A10's
    assert F.sm_count("A10-24GB") == 72 and F.sm_count("A100-PCIE-40GB") == 108
    # 1 + 1/132 of a wave on an H100 but tile-exact: only the wave term can lose
    assert F.gemm_shape_efficiency(128 * 133, 1024, 128, None) == pytest.approx(1.0)


def test_attention_table_rows_are_read():
    # FA3 paper Fig. 5(d): FA2 forward, causal, head dim 128, 16k: 335 TFLOP/s of 989.4
    assert F.attention_efficiency("H100-SXM-80GB", "fwd", seq_len=16384) == \
        pytest.approx(335 / 989.4)
    # Fig. 6(b): FA2 backward, non-causal, head dim 128, 2k: 291
    assert F.attention_efficiency("H100-SXM-80GB", "bwd", seq_len=2048, causal=False) == \
        pytest.approx(291 / 989.4)
    # te-fused reads the cuDNN rows: Fig. 5(d) 2k 484
    assert F.attention_efficiency("H100-SXM-80GB", "fwd", "te-fused", seq_len=2048) == \
        pytest.approx(484 / 989.4)


def test_attention_interpolation_in_log_seq_and_head_dim():
    # halfway between 2k (298) and 4k (319) in log2: sqrt(2) * 2048
    s = 2048 * math.sqrt(2)
    assert F.attention_efficiency("H100-SXM-80GB", "fwd", seq_len=s) == \
        pytest.approx((298 + 319) / 2 / 989.4)
    # clamped outside the measured range
    assert F.attention_efficiency("H100-SXM-80GB", "fwd", seq_len=100) == \
        pytest.approx(191 / 989.4)
    # head dim 96 sits halfway (log2) between 64 and 128... at 1k: 229 and 260
    mid = F.attention_efficiency("H100-SXM-80GB", "fwd", seq_len=1024, head_dim=64 * math.sqrt(2))
    assert mid == pytest.approx((229 + 260) / 2 / 989.4)


def test_causal_backward_is_derived_from_the_forward_ratio():
    # Fig. 6 has no causal panel: non-causal bwd x causal fwd / non-causal fwd
    got = F.attention_efficiency("H100-SXM-80GB", "bwd", seq_len=4096)
    assert got == pytest.approx(310 / 989.4 * 319 / 368)


def test_same_silicon_reads_the_figure_and_others_get_a_note():
    h100 = F.attention_efficiency_and_note("H100-SXM-80GB", "fwd")
    # H200 reads its own rows (measured by fmest, 2026-11-27): no note, and the same 132-SM
    # Hopper silicon lands within 5 % of the H100's FA2 bar at seq 4096, head dim 128
    h200 = F.attention_efficiency_and_note("H200-SXM-141GB", "fwd")
    assert h100[1] is None and h200[1] is None
    assert h200[0] == pytest.approx(308.5 / 989.4, rel=1e-9)
    assert h200[0] == pytest.approx(h100[0], rel=0.05)
    eff, note = F.attention_efficiency_and_note("B200-SXM-180GB", "fwd")
    assert note is not None and "no published fa2" in note and "MAMF" in note
    # the stated derivation: B200's MAMF x (each measured GPU's FA2 fraction / its MAMF, mean
    # over A100, H100 and H200)
    ratios = [F.attention_efficiency(g, "fwd") / F.mamf_fraction(g, "bf16")
              for g in ("A100-SXM-80GB", "H100-SXM-80GB", "H200-SXM-141GB")]
    assert eff == pytest.approx(F.mamf_fraction("B200-SXM-180GB", "bf16") * sum(ratios) / 3)
    # A100 is published as forward+backward (FA2 paper Fig. 4): split, no note, bwd < fwd
    eff, note = F.attention_efficiency_and_note("A100-SXM-80GB", "bwd")
    assert note is None
    assert eff < F.attention_efficiency("A100-SXM-80GB", "fwd")


def _a100_peak() -> float:
    from fmest.gpus import shipped_gpus

    return next(g for g in shipped_gpus() if g.name == "A100-SXM-80GB").peak_flops_per_s("bf16")


@pytest.mark.parametrize("causal,head_dim,seq,tflops", [
    (True, 128, 4096, 173), (False, 128, 16384, 203), (True, 64, 512, 88), (False, 64, 2048, 162)])
def test_a100_fwd_bwd_figure_is_split_and_recomposes(causal, head_dim, seq, tflops):
    # FlashAttention-2 arXiv:2307.08691 Fig. 4 (A100 80GB SXM4, fwd+bwd bar labels): the split
    # forward and backward recompose the published rate: 3.5 F / (F / r_fwd + 2.5 F / r_bwd)
    kw = dict(seq_len=seq, head_dim=head_dim, causal=causal)
    fwd = F.attention_efficiency("A100-SXM-80GB", "fwd", **kw)
    bwd = F.attention_efficiency("A100-SXM-80GB", "bwd", **kw)
    combined = 3.5 / (1.0 / fwd + 2.5 / bwd) * _a100_peak() / 1e12
    assert combined == pytest.approx(tflops, rel=1e-9)
    # the split uses the mean bwd/fwd ratio FA2 reaches on the GPUs measured in both
    # directions at the same point: H100 (FA3 paper), and for a causal mask the H200 (fmest)
    ratios = [F.attention_efficiency(g, "bwd", **kw) / F.attention_efficiency(g, "fwd", **kw)
              for g in ("H100-SXM-80GB",) + (("H200-SXM-141GB",) if causal else ())]
    assert bwd / fwd == pytest.approx(sum(ratios) / len(ratios))


def test_a100_rows_cite_the_flashattention2_paper():
    from importlib import resources

    text = resources.files("fmest").joinpath("data/attention_kernels.csv").read_text("utf-8")
    a100 = [line for line in text.splitlines() if line.startswith("A100-SXM-80GB,")]
    assert len(a100) == 24
    assert all(",fa2,fwd+bwd," in line and "arXiv:2307.08691 Fig. 4" in line for line in a100)


def test_megatron_fused_softmax_score_bytes():
    # bigscience Megatron-DeepSpeed eager attention: baddbmm + ScaledUpperTriangMaskedSoftmax
    # + bmm in fp16/bf16: 8 bytes per score forward, 14 backward (stacks.toml), far below the
    # HF eager chain with its fp32 softmax (20 x 1.93)
    from fmest.stacks import load_profiles

    profile = next(p for p in load_profiles() if p.name == "megatron-deepspeed")
    own = (profile.elementwise_bytes["scores"], profile.elementwise_bytes["scores_backward"])
    assert own == (8.0, 14.0)
    fused = F.eager_attention_bytes_per_token_per_layer(8, 2048, stack_bytes=own)
    assert fused == pytest.approx(22.0 * 8 * 2048)
    assert fused < F.eager_attention_bytes_per_token_per_layer(8, 2048)


def test_attention_below_matmul_efficiency_where_measured():
    for gpu in ("H100-SXM-80GB", "A100-SXM-80GB"):
        for direction in ("fwd", "bwd"):
            assert F.attention_efficiency(gpu, direction, seq_len=16384) < \
                F.mamf_fraction(gpu, "bf16")


# -- sustained (power-limited) GEMM rate ------------------------------------------------------

def test_sustained_gemm_fraction_of_the_measured_and_same_board_gpus():
    # H200 and H100 SXM measured; H800 is the H100 SXM's board; A800 the A100 SXM die
    assert F.gemm_fraction_and_note("H200-SXM-141GB", "bf16") == (0.720, None)
    assert F.gemm_fraction_and_note("H100-SXM-80GB", "bf16") == (0.686, None)
    assert F.gemm_fraction("H800-SXM-80GB", "fp8") == 0.612
    assert F.gemm_fraction("A100-SXM-80GB", "bf16") == 0.824
    assert F.gemm_fraction("A800-SXM-80GB", "fp16") == 0.824
    # every measured figure sits below the burst (MAMF) figure of the same GPU
    for gpu in ("H200-SXM-141GB", "H100-SXM-80GB", "A100-SXM-80GB"):
        assert F.gemm_fraction(gpu, "bf16") < F.mamf_fraction(gpu, "bf16")


def test_gpu_without_a_sustained_figure_scales_its_own_mamf_and_says_so():
    ratio = (0.720 / F.mamf_fraction("H200", "bf16") + 0.686 / F.mamf_fraction("H100-SXM", "bf16")
             + 0.824 / F.mamf_fraction("A100-SXM", "bf16")) / 3
    frac, note = F.gemm_fraction_and_note("B200-SXM-180GB", "bf16")
    assert frac == pytest.approx(F.mamf_fraction("B200-SXM-180GB", "bf16") * ratio)
    assert note is not None and "B200-SXM-180GB" in note and "H200, H100-SXM, A100-SXM" in note
    frac8, note8 = F.gemm_fraction_and_note("B200-SXM-180GB", "fp8")
    ratio8 = (0.671 / F.mamf_fraction("H200", "fp8") + 0.612 / F.mamf_fraction("H100-SXM", "fp8")) / 2
    assert frac8 == pytest.approx(F.mamf_fraction("B200-SXM-180GB", "fp8") * ratio8)
    assert note8 is not None and "fp8" in note8
    # a GPU outside the MAMF table too: the MAMF default times the same ratio
    assert F.gemm_fraction("T4", "bf16") == pytest.approx(F.MAMF_FRACTION_DEFAULT * ratio)


def test_h100_sustained_figure_is_the_committed_measurement():
    """The H100 constants are the 4 s back-to-back ``sustained`` rows of the committed CSV."""
    import csv
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    path = root / "benchmarks/gpu/results/H100-SXM-80GB-2026-11-27/microbench_H100-SXM-80GB.csv"
    rows = {r["dtype"]: r for r in csv.DictReader(open(path, encoding="utf-8"))
            if r["kind"] == "sustained" and r["status"] == "ok"}
    for dtype, peak, table in (("bf16", 989.4e12, F.SUSTAINED_GEMM_FRACTION_BF16),
                               ("fp8", 1978.9e12, F.SUSTAINED_GEMM_FRACTION_FP8)):
        assert table["H100-SXM"] == pytest.approx(float(rows[dtype]["tflops"]) * 1e12 / peak,
                                                  abs=0.001)


def test_h200_sustained_figure_is_the_committed_measurement():
    """The H200 constants are the medians of the longest GEMMs of the committed microbench CSV
    (back-to-back iterations past 100 ms: the power-limited clock)."""
    import csv
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    path = root / "benchmarks/gpu/results/H200-SXM-141GB-2026-11-27/microbench_H200-SXM-141GB.csv"
    rows = {(r["shape"], r["dtype"]): r for r in csv.DictReader(open(path, encoding="utf-8"))
            if r["kind"] == "mamf" and r["status"] == "ok"}
    s = 16384
    for dtype, peak, table in (("bf16", 989.4e12, F.SUSTAINED_GEMM_FRACTION_BF16),
                               ("fp8", 1978.9e12, F.SUSTAINED_GEMM_FRACTION_FP8)):
        r = rows[(f"{s}x{s}x{s}", dtype)]
        assert float(r["median_ms"]) * int(r["n_iter"]) > 100     # past the burst window
        measured = 2 * s ** 3 / (float(r["median_ms"]) / 1e3) / peak
        assert table["H200"] == pytest.approx(measured, abs=0.001)


def test_step_gemms_run_at_the_sustained_rate():
    """device_rates gives the step's GEMMs the sustained fraction, and names a GPU without a
    figure of its own in the answer's notes."""
    import fmest
    from fmest.engine import Engine

    engine = Engine()
    job = fmest.to_job({"model": "meta-llama/Llama-2-7b-hf", "hardware": {"gpu": "H100-SXM-80GB"}})
    from fmest_time_roofline.estimator import device_rates
    rates = device_rates(job, engine.context(job).gpu)
    assert rates.linear_fraction == 0.686
    b200 = job.evolve(hardware={"gpu": "B200-SXM-180GB"})
    report = engine.estimate(b200, quantities=("memory", "time"))
    assert any("no measured sustained bf16 GEMM rate" in n for n in report.time.notes)


@pytest.mark.parametrize("gpu,folder,bw", [
    ("H200-SXM-141GB", "H200-SXM-141GB-2026-11-27", 4.8e12),
    ("H100-SXM-80GB", "H100-SXM-80GB-2026-11-27", 3.35e12)])
def test_adamw_bandwidth_fractions_reproduce_the_measured_steps(gpu, folder, bw):
    """bytes (optimizer_update_bytes_per_param) / (HBM peak x fraction) gives the committed
    AdamW times of 1e9 parameters on each measured GPU (and bitsandbytes' 8-bit AdamW on the
    H100, where it was timed)."""
    import csv
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    path = root / "benchmarks/gpu/results" / folder / f"microbench_{gpu}.csv"
    rows = [r for r in csv.DictReader(open(path, encoding="utf-8"))
            if r["kind"] == "adamw" and r["shape"].startswith("1000000000") and r["status"] == "ok"]
    assert len(rows) >= 4
    for r in rows:
        impl, width = r["backend"], r["dtype"]
        b = 4.0 if width == "fp32" else 2.0
        if impl == "bnb8bit":
            per_param = F.optimizer_update_bytes_per_param(
                states=2, state_bytes=1.0 + 4.0 / 2048, param_bytes=b, grad_bytes=b, impl="fused")
            frac = F.optimizer_bandwidth_fraction("adamw_8bit", "fused", b, gpu_name=gpu)
        else:
            per_param = F.optimizer_update_bytes_per_param(states=2, state_bytes=b, param_bytes=b,
                                                           grad_bytes=b, impl=impl)
            frac = F.optimizer_bandwidth_fraction("adamw", impl, b, gpu_name=gpu)
        modelled = 1e9 * per_param / (bw * frac)
        assert modelled == pytest.approx(float(r["median_ms"]) / 1e3, rel=0.01), r["backend"]


def test_adamw_bandwidth_fraction_lookup():
    # a master copy reads the fp32 figure; a GPU not measured gets the mean of the measured;
    # optimizers without a figure keep HBM_EFFICIENCY
    assert F.optimizer_bandwidth_fraction("adamw", "fused", 2, master_bytes=4,
                                          gpu_name="H200-SXM-141GB") == 0.723
    assert F.optimizer_bandwidth_fraction("adamw", "fused", 2, master_bytes=4,
                                          gpu_name="H800-SXM-80GB") == 0.783
    assert F.optimizer_bandwidth_fraction("adamw", "foreach", 2, gpu_name="A100-SXM-80GB") == \
        pytest.approx((0.671 + 0.759) / 2)
    assert F.optimizer_bandwidth_fraction("adamw_8bit", "fused", 2) == F.BNB_8BIT_BANDWIDTH_FRACTION
    assert F.optimizer_bandwidth_fraction("lion", "foreach", 4) == F.HBM_EFFICIENCY


def test_own_kernel_optimizers_ignore_the_foreach_setting():
    """bitsandbytes' AdamW8bit runs one pass per tensor whatever ``optimizer_impl`` says
    (OptimizerSpec.own_kernel): its step time is the same under foreach and fused, at
    BNB_8BIT_BANDWIDTH_FRACTION on its one-pass bytes; torch's AdamW still triples its passes."""
    import fmest
    from fmest.engine import Engine

    engine = Engine()

    def opt_seconds(optimizer, impl):
        job = fmest.to_job({"model": "meta-llama/Llama-2-7b-hf",
                            "hardware": {"gpu": "H100-SXM-80GB"},
                            "training": {"optimizer": optimizer, "optimizer_impl": impl}})
        return engine.estimate(job, quantities=("memory", "time")).time.breakdown["optimizer_step"]

    assert opt_seconds("adamw_8bit", "foreach") == pytest.approx(opt_seconds("adamw_8bit", "fused"))
    assert opt_seconds("adamw", "foreach") > 2 * opt_seconds("adamw", "fused")
