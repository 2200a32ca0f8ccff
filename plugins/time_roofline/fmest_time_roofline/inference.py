"""Time of LLM inference: prefill (compute-bound), decode (bandwidth-bound) per token, tokens/s
at a batch and cost per million tokens.

Roofline reasoning after Pope et al. 2022 ("Efficiently Scaling Transformer Inference",
arXiv:2211.05102, section 2): prefill processes ``batch x prompt`` tokens at once and is limited
by matmul FLOPs; each decode step produces one token per sequence and must stream every weight
and the KV cache of every sequence from HBM, so it is limited by memory bandwidth until the batch
is large enough (``batch >~ peak_flops / hbm_bandwidth`` per weight byte) to become compute-bound.
Tensor parallelism adds two all-reduces of ``batch x hidden`` activations per layer (Megatron-LM,
Shoeybi et al. 2019, section 3).

Pure functions; the numbers of the GPU come from the GPU table (fmest.gpus), efficiencies from
:mod:`fmest_time_roofline.formulas` and the constants below.
"""

from __future__ import annotations

from typing import Optional

from attrs import frozen

from fmest_time_roofline.formulas import (
    HBM_EFFICIENCY,
    INTRA_NODE_COLLECTIVE_EFFICIENCY,
    INTRA_NODE_LATENCY_S,
    attention_efficiency,
    gemm_fraction,
    linear_forward_flops_per_token,
)

#: Decode steps are chains of small kernels, about a dozen per layer (norms, QKV, rotary,
#: attention, output, MLP, residuals), each with a fixed launch/tail cost of about a microsecond
#: even under CUDA graphs. Assumed, not measured: 12 us per layer; the fitted per-step overhead
#: below absorbs what this misses (its leave-one-source-out error is what
#: benchmarks/inference_accuracy.py reports). The "memory-bandwidth utilization" view of decode
#: is Databricks/MosaicML's ("LLM Inference Performance Engineering: Best Practices", 2023).
DECODE_SECONDS_PER_LAYER = 12e-6
#: Fixed time of one decode step outside the GPU kernels (scheduler, sampler, detokenizer,
#: Python), per serving runtime. Fitted (median residual step time) by
#: ``python benchmarks/inference_accuracy.py --fit`` on the published rows of
#: benchmarks/data/parts/inference.csv; the leave-one-source-out error is printed there.
DECODE_STEP_OVERHEAD_S = {"vllm": 4.48e-3, "tensorrt-llm": 8.67e-3}
DEFAULT_RUNTIME = "vllm"


def decode_step_overhead_s(runtime: str) -> float:
    """Fixed per-step time of ``runtime`` (``DECODE_STEP_OVERHEAD_S``; unknown runtimes get
    vLLM's)."""
    return DECODE_STEP_OVERHEAD_S.get(runtime, DECODE_STEP_OVERHEAD_S[DEFAULT_RUNTIME])


#: One all-reduce of a few KB-MB on NVLink: launch + sync latency of a one-shot (custom)
#: all-reduce (vLLM custom_all_reduce; NCCL tests small-message latency) ~ 2 x link latency.
ALLREDUCE_LATENCY_FACTOR = 2.0


@frozen(kw_only=True)
class GpuRates:
    """What the roofline needs from the GPU table."""

    name: str
    peak_flops_per_s: float      # dense tensor-core peak in the compute dtype
    hbm_bytes_per_s: float
    link_bytes_per_s: float      # intra-node (NVLink) per-GPU bandwidth


@frozen(kw_only=True)
class InferenceTime:
    """Seconds of one batch's prefill and of one decode step, and derived throughput."""

    prefill_seconds: float
    decode_step_seconds: float
    decode_breakdown: dict
    batch: int
    prompt_tokens: int
    output_tokens: int
    gpus: int

    @property
    def decode_tokens_per_s(self) -> float:
        """Steady-state generated tokens/s of the replica (``batch`` tokens per step)."""
        return self.batch / self.decode_step_seconds

    @property
    def request_seconds(self) -> float:
        """Prefill plus ``output_tokens`` decode steps: one batch from prompt to last token."""
        return self.prefill_seconds + self.output_tokens * self.decode_step_seconds

    @property
    def output_tokens_per_s(self) -> float:
        """Generated tokens/s including the prefill of each batch (static batching bound)."""
        return self.batch * self.output_tokens / self.request_seconds

    @property
    def time_to_first_token_s(self) -> float:
        return self.prefill_seconds


def generated_token_flops(model) -> float:
    """Forward matmul FLOPs of one generated token: the decoder's linears only (a vision tower
    runs once per image and an encoder once per prompt, not per generated token)."""
    total = linear_forward_flops_per_token(model)
    for lin in model.linears:
        flops = 2.0 * lin.in_features * lin.out_features * lin.layers * lin.active_copies
        if lin.kind == "vision":
            total -= flops
        elif model.is_encoder_decoder and lin.kind in ("attention", "mlp"):
            total -= flops * model.num_encoder_layers / model.num_layers
    return total


def prefill_seconds(model, *, batch: int, prompt_tokens: int, tp: int, rates: GpuRates,
                    dtype: str = "bf16") -> float:
    """Compute-bound prefill of ``batch`` prompts: linear FLOPs at the sustained GEMM rate
    (formulas.gemm_fraction) plus causal attention FLOPs at the fused-attention efficiency,
    split over ``tp``
    (Pope et al. 2022, section 2; Narayanan et al. 2021 eq. 2 for attention FLOPs)."""
    tokens = batch * prompt_tokens
    linear = linear_forward_flops_per_token(model) * tokens
    d_qk = model.qk_head_dim or model.head_dim
    d_v = model.v_head_dim or model.head_dim
    context = min(prompt_tokens / 2.0, float(model.sliding_window or prompt_tokens))
    attention = 2.0 * model.num_attention_heads * (d_qk + d_v) * context * tokens \
        * model.num_decoder_layers
    linear_s = linear / (rates.peak_flops_per_s * gemm_fraction(rates.name, dtype) * tp)
    attention_s = attention / (rates.peak_flops_per_s * attention_efficiency(rates.name) * tp)
    return linear_s + attention_s


def decode_step_seconds(model, *, batch: int, weights_bytes_per_gpu: float,
                        kv_bytes_per_gpu: float, tp: int, pp: int, rates: GpuRates,
                        dtype: str = "bf16", step_overhead_s: float = 0.0) -> dict:
    """One decode step (one token for each of ``batch`` sequences) as named parts (seconds).

    ``memory``: stream the GPU's weights and the KV cache it holds from HBM (the bandwidth
    bound of Pope et al. 2022); ``compute``: 2 x active params FLOPs per token when the batch is
    large enough to be compute-bound (the max of the two is what the step takes);
    ``communication_tp``: two all-reduces of ``batch x hidden`` per layer;
    ``framework_overhead``: fixed kernel-launch time per layer (``DECODE_SECONDS_PER_LAYER``)
    plus the runtime's fixed per-step time ``step_overhead_s`` (``DECODE_STEP_OVERHEAD_S``).
    With pipeline stages a token visits each stage in turn, so their times add.
    """
    memory_s = (weights_bytes_per_gpu + kv_bytes_per_gpu) / (rates.hbm_bytes_per_s
                                                             * HBM_EFFICIENCY) * pp
    flops = generated_token_flops(model) * batch
    compute_s = flops / (rates.peak_flops_per_s * gemm_fraction(rates.name, dtype) * tp)
    layers = model.num_decoder_layers
    comm_s = 0.0
    if tp > 1:
        message = batch * model.hidden_size * 2.0
        per_allreduce = ALLREDUCE_LATENCY_FACTOR * INTRA_NODE_LATENCY_S \
            + 2.0 * (tp - 1) / tp * message / (rates.link_bytes_per_s
                                                * INTRA_NODE_COLLECTIVE_EFFICIENCY)
        comm_s = 2 * layers * per_allreduce
    bound = max(memory_s, compute_s)
    return {"memory_bound" if memory_s >= compute_s else "compute": bound,
            "communication_tp": comm_s,
            "framework_overhead": DECODE_SECONDS_PER_LAYER * layers + step_overhead_s}


def inference_time(model, *, batch: int, prompt_tokens: int, output_tokens: int,
                   weights_bytes_per_gpu: float, kv_bytes_per_token_per_gpu: float,
                   tp: int, pp: int, gpus: int, rates: GpuRates,
                   dtype: str = "bf16", runtime: str = DEFAULT_RUNTIME,
                   step_overhead_s: Optional[float] = None) -> InferenceTime:
    """Prefill and decode of one batch. The decode step is costed at the mean context
    (prompt + half the output), where the KV cache read is its average size. The runtime's
    fixed step time is ``DECODE_STEP_OVERHEAD_S[runtime]`` unless ``step_overhead_s`` is
    given."""
    if step_overhead_s is None:
        step_overhead_s = decode_step_overhead_s(runtime)
    mean_context = prompt_tokens + output_tokens / 2.0
    kv_bytes = kv_bytes_per_token_per_gpu * batch * mean_context
    parts = decode_step_seconds(model, batch=batch, weights_bytes_per_gpu=weights_bytes_per_gpu,
                                kv_bytes_per_gpu=kv_bytes, tp=tp, pp=pp, rates=rates,
                                dtype=dtype, step_overhead_s=step_overhead_s)
    return InferenceTime(
        prefill_seconds=prefill_seconds(model, batch=batch, prompt_tokens=prompt_tokens, tp=tp,
                                        rates=rates, dtype=dtype),
        decode_step_seconds=sum(parts.values()), decode_breakdown=parts, batch=batch,
        prompt_tokens=prompt_tokens, output_tokens=output_tokens, gpus=gpus)


def usd_per_million_tokens(*, usd_per_gpu_hour: float, gpus: int,
                           tokens_per_s: float) -> Optional[float]:
    """Rental cost of a million generated tokens: GPU-hours per token x price x 1e6."""
    if tokens_per_s <= 0:
        return None
    return usd_per_gpu_hour * gpus / 3600.0 / tokens_per_s * 1e6


# ---------------------------------------------------------------------------------------------
# job -> estimates (the plugin's time/tokens hooks call these when job.mode is inference)
# ---------------------------------------------------------------------------------------------

#: generated tokens the run-time (and so the cost) is quoted for
TOKENS_PRICED = 1_000_000


def rates_of(gpu, dtype: str) -> GpuRates:
    """The GPU table's numbers the roofline needs (fp8 peak when the weights are fp8)."""
    peak = (gpu.fp8_flops_per_s if dtype == "fp8" and gpu.fp8_flops_per_s
            else gpu.bf16_flops_per_s or gpu.fp16_flops_per_s or gpu.fp32_flops_per_s)
    return GpuRates(name=gpu.name, peak_flops_per_s=float(peak),
                    hbm_bytes_per_s=float(gpu.hbm_bytes_per_s),
                    link_bytes_per_s=float(gpu.intra_node_bytes_per_s or 0.0))


def job_inference_time(job, ctx, memory) -> InferenceTime:
    """The :class:`InferenceTime` of a job in inference mode (one replica of tp x pp GPUs).

    Weight and KV-cache bytes per GPU come from the memory answer the engine passes
    (components ``weights`` and ``kv_cache``, the cache at the full context), so the time model
    reads what the memory model sized instead of re-deriving storage formats."""
    inf = job.inference
    layout = ctx.layout
    output = max(1, min(inf.output_tokens, inf.context - 1))
    prompt = max(1, inf.context - output)
    dtype = "fp8" if job.training.dtype == "fp8" else "bf16"
    weights = float(memory.components.get("weights", 0)) if memory else 0.0
    kv_full = float(memory.components.get("kv_cache", 0)) if memory else 0.0
    kv_per_token = kv_full / (inf.batch * inf.context) if inf.context else 0.0
    return inference_time(ctx.model, batch=inf.batch, prompt_tokens=prompt,
                          output_tokens=output, weights_bytes_per_gpu=weights,
                          kv_bytes_per_token_per_gpu=kv_per_token, tp=layout.tp, pp=layout.pp,
                          gpus=layout.tp * layout.pp, rates=rates_of(ctx.gpu, dtype),
                          dtype=dtype, runtime=inf.runtime)


def estimate_inference_time(job, ctx, memory):
    """A :class:`fmest.estimates.TimeEstimate` for serving. ``step_seconds`` is one batch from
    prompt to last token (prefill + output decode steps); ``total_seconds`` is the time the job
    (all replicas) takes to generate ``TOKENS_PRICED`` tokens, so the cost plugin's ``usd`` is
    the cost per million generated tokens."""
    from fmest.estimates import Provenance, TimeEstimate

    timing = job_inference_time(job, ctx, memory)
    replicas = max(1, ctx.layout.world_size // timing.gpus)
    steps = timing.output_tokens
    parts = {"compute": timing.prefill_seconds}
    for name, seconds in timing.decode_breakdown.items():
        parts[name] = parts.get(name, 0.0) + seconds * steps
    job_tokens_per_s = timing.output_tokens_per_s * replicas
    notes = (f"prefill (time to first token) {timing.prefill_seconds * 1e3:.1f} ms for "
             f"{timing.batch} x {timing.prompt_tokens} prompt tokens",
             f"decode step {timing.decode_step_seconds * 1e3:.2f} ms at batch {timing.batch}: "
             f"{timing.decode_tokens_per_s * replicas:.0f} tokens/s while decoding",
             f"total_seconds = time to generate {TOKENS_PRICED:,} tokens; the cost is per "
             f"million generated tokens")
    return TimeEstimate(step_seconds=timing.request_seconds, breakdown=parts,
                        provenance=Provenance(basis="analytic", detail="inference roofline: "
                                              "compute-bound prefill, bandwidth-bound decode"),
                        total_seconds=TOKENS_PRICED / job_tokens_per_s,
                        total_steps=TOKENS_PRICED / (timing.batch * steps * replicas),
                        notes=notes,
                        metrics={"prefill_seconds": timing.prefill_seconds,
                                 "decode_step_seconds": timing.decode_step_seconds,
                                 "decode_tokens_per_second":
                                     timing.decode_tokens_per_s * replicas,
                                 "tokens_priced": float(TOKENS_PRICED)})


def estimate_inference_tokens(job, ctx, time, memory=None):
    """A :class:`fmest.estimates.TokensEstimate`: generated tokens/s of the job (prefill
    included) and per GPU; the notes carry the decode-only rate."""
    from fmest.estimates import Provenance, TokensEstimate

    if time is None or not time.total_seconds:
        return None
    per_s = TOKENS_PRICED / time.total_seconds
    return TokensEstimate(tokens_per_second=per_s,
                          tokens_per_second_per_gpu=per_s / ctx.layout.world_size,
                          provenance=Provenance(basis="analytic",
                                                detail="generated tokens/s, prefill included"),
                          notes=tuple(n for n in time.notes if n.startswith("decode step")))
