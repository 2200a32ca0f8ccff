"""Per-GPU memory of LLM inference (serving): weights in their storage format, the KV cache, the
activation working set of the largest prefill chunk, and the runtime's own reserve.

Pure functions over a :class:`fmest.models.spec.ModelSpec` and plain numbers; the plugin calls
:func:`inference_memory` and turns the :class:`InferenceMemory` into components. Sources are
named in each docstring; docs/inference.md states the model in words.

Conventions (vLLM's, the most common server; TGI and TensorRT-LLM differ where noted in
docs/inference.md): weights are loaded first, a profiling forward pass at
``max_num_batched_tokens`` sets the activation peak, CUDA graphs are captured, and the KV cache
takes what is left of ``gpu_memory_utilization x capacity`` (vLLM docs, "Optimization and
Tuning" and engine arguments: ``gpu_memory_utilization`` default 0.9, ``block_size`` 16,
``max_num_seqs`` 256).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Optional

from attrs import frozen

from fmest.models.images import vlm_sequence_len
from fmest_memory_theory.memo import by_identity

if TYPE_CHECKING:
    from fmest.engine import EstimateContext
    from fmest.estimates import MemoryEstimate
    from fmest.job import Job
    from fmest.models.spec import ModelSpec

GIB = float(1 << 30)

#: Storage bytes per element of the weight formats (fp8/int8: one byte plus per-channel or
#: per-tensor scales, negligible; NVIDIA NIM memory guide: "BF16 2, FP8 1, INT4 0.5").
WEIGHT_FORMAT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0,
                       "int4": 0.5, "gptq": 0.5, "awq": 0.5, "nf4": 0.5}
WEIGHT_FORMATS = tuple(WEIGHT_FORMAT_BYTES)
#: GPTQ/AWQ keep one fp16 scale and one packed 4-bit zero point per group of ``group_size``
#: input channels (AutoGPTQ/AutoAWQ checkpoint layout: ``scales`` fp16, ``qzeros`` int32 packing
#: 8 zeros), so (2 + 0.5) bytes per group.
GROUP_SCALE_BYTES = 2.0 + 0.5
DEFAULT_GROUP_SIZE = 128
#: NF4 with double quantization: 0.5 byte + an 8-bit absmax per 64 weights + an fp32 constant per
#: 256 blocks (Dettmers et al. 2023, QLoRA, section 3: "8/64 + 32/(64*256) = 0.127 bits").
NF4_OVERHEAD_BITS = 8 / 64 + 32 / (64 * 256)
KV_FORMAT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0}
#: vLLM defaults: paged KV block of 16 tokens (engine arguments docs); the prefill chunk
#: ``max_num_batched_tokens`` and ``max_num_seqs`` of its OpenAI server are 8192 / 1024 on GPUs
#: with >= 70 GiB other than A100 and 2048 / 256 elsewhere (vllm/engine/arg_utils.py,
#: ``EngineArgs.get_batch_defaults``); fmest takes 8192 and 256 (the job can set both).
DEFAULT_KV_BLOCK_TOKENS = 16
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_PREFILL_CHUNK_TOKENS = 8192
DEFAULT_GPU_MEMORY_UTILIZATION = 0.90
#: CUDA graphs captured for decode batch sizes: vLLM logs "Graph capturing finished in 14 secs,
#: took 0.21 GiB" for Llama-3.2-1B-Instruct (vllm-project/vllm PR #11349, 2024-12-19) and
#: "Estimated CUDA graph memory: 0.36 GiB total" (gpustack/runner PR #251, vLLM 0.27); graphs
#: grow with the layers captured, so 0.5 GiB is assumed for the 7B-70B models this is used for.
#: Set to 0 in eager mode (``cuda_graphs`` false).
CUDA_GRAPH_BYTES = 0.5 * GIB
#: CUDA context + cuBLAS workspaces + NCCL buffers: nvidia-smi memory outside PyTorch's allocator
#: (the same terms as training, fmest.physics.device_terms).
NON_TORCH_BYTES = 0.75 * GIB
#: logits are upcast to fp32 for sampling (vLLM sampler), one row per sequence in the step
LOGIT_BYTES = 4.0
#: Serving runtimes: ``vllm`` (paged KV cache pre-allocated up to ``gpu_memory_utilization``,
#: chunked prefill, logits of the last token only, CUDA graphs; TensorRT-LLM and TGI behave alike
#: for this model) and ``transformers`` (``model.generate``: a contiguous cache of exactly the
#: tokens seen, the whole prompt in one forward pass whose logits are computed for every prompt
#: token in the compute dtype and upcast to fp32 -- ``logits.float()`` in the causal-LM heads of
#: transformers 4.38-4.44 -- no CUDA graphs, nothing pre-allocated).
RUNTIMES = ("vllm", "transformers")


def weight_bytes_per_param(fmt: str, *, group_size: int = DEFAULT_GROUP_SIZE) -> float:
    """Bytes one quantized/unquantized linear weight occupies in ``fmt`` (scales included)."""
    base = WEIGHT_FORMAT_BYTES[fmt]
    if fmt in ("int4", "gptq", "awq"):
        return base + GROUP_SCALE_BYTES / group_size
    if fmt == "nf4":
        return base + NF4_OVERHEAD_BITS / 8
    return base


@frozen(kw_only=True)
class ShardPlan:
    """How the model is split: tensor, pipeline and expert parallel degrees."""

    tp: int = 1
    pp: int = 1
    ep: int = 1


_WEIGHT_BYTES: dict[tuple, tuple[object, float]] = {}


def weight_bytes_per_gpu(model: ModelSpec, fmt: str, *, shard: ShardPlan, group_size: int = 128,
                         unquantized_bytes: float = 2.0) -> float:
    """Weights on one GPU: linear layers (not the output head) in ``fmt``; embeddings, head, norms
    and vision tower in ``unquantized_bytes`` (GPTQ/AWQ/bitsandbytes/vLLM fp8 keep ``lm_head``
    and embeddings unquantized). Layers split over ``pp`` stages and ``tp`` ranks; experts over
    ``ep`` x ``tp`` (vLLM's fused-MoE shards experts over the TP x EP group).

    Cached per model object and arguments: the batch and context searches of one estimate
    (:func:`max_batch`, :func:`max_context`) ask for the same weights some fifty times.
    """
    return by_identity(_WEIGHT_BYTES, model, (fmt, shard, group_size, unquantized_bytes),
                       lambda: _weight_bytes_per_gpu(model, fmt, shard, group_size,
                                                     unquantized_bytes))


def _weight_bytes_per_gpu(model: ModelSpec, fmt: str, shard: ShardPlan, group_size: int,
                          unquantized_bytes: float) -> float:
    per_param = weight_bytes_per_param(fmt, group_size=group_size)
    layer_bytes = expert_bytes = other_bytes = 0.0
    for lin in model.linears:
        if lin.kind in ("head", "vision"):
            other_bytes += lin.params * unquantized_bytes
        elif lin.kind == "expert":
            expert_bytes += lin.weight_params * per_param + lin.bias_params * unquantized_bytes
        else:
            layer_bytes += lin.weight_params * per_param + lin.bias_params * unquantized_bytes
    norms = sum(g.params for g in model.groups if g.kind == "norm")
    inputs = sum(g.params for g in model.groups if g.kind in ("embedding", "position", "vision",
                                                                "other"))
    layer_bytes += norms * unquantized_bytes
    per_stage = (layer_bytes / shard.tp + expert_bytes / (shard.tp * shard.ep)) / shard.pp
    # vocab-parallel embedding and head are split over tp; with pipeline stages the first stage
    # holds the embedding (and vision tower), the last the head: the larger one sets the peak
    first, last = inputs * unquantized_bytes / shard.tp, other_bytes / shard.tp
    return per_stage + (first + last if shard.pp == 1 else max(first, last))


def kv_heads_per_gpu(num_kv_heads: int, tp: int) -> float:
    """KV heads one TP rank keeps: heads are split, and replicated when tp exceeds them
    (vLLM ``QKVParallelLinear``: ``num_kv_head_replicas = tp // num_kv_heads``)."""
    return max(1.0, num_kv_heads / tp)


def kv_bytes_per_token_per_layer(model: ModelSpec, kv_bytes: float, *, tp: int = 1) -> float:
    """K and V of one token in one self-attention layer on one GPU.

    Multi-head/grouped-query attention: 2 x kv_heads x head_dim (Ainslie et al. 2023, GQA).
    Multi-head latent attention (DeepSeek-V2/V3): the compressed latent ``kv_lora_rank`` plus the
    decoupled RoPE key ``qk_rope_head_dim``, not split over TP (DeepSeek-V2 paper, arXiv:2405.04434,
    table 1: (d_c + d_h^R) x l elements per token; vLLM's MLA backend caches exactly that).
    """
    if model.kv_lora_rank:
        rope = int((model.hf_config or {}).get("qk_rope_head_dim", 64))
        return (model.kv_lora_rank + rope) * kv_bytes
    return 2.0 * kv_heads_per_gpu(model.num_kv_heads, tp) * model.head_dim * kv_bytes


def sliding_layers(model: ModelSpec) -> int:
    """Layers that attend only within ``sliding_window`` tokens
    (:func:`fmest.models.spec.sliding_layers`, shared with the time model)."""
    from fmest.models.spec import sliding_layers as rule

    return rule(model)


def paged_tokens(tokens: int, block_tokens: int) -> int:
    """Tokens a paged KV cache allocates for ``tokens``: whole blocks (vLLM PagedAttention,
    Kwon et al. 2023, arXiv:2309.06180)."""
    if block_tokens <= 1:
        return tokens
    return int(math.ceil(tokens / block_tokens) * block_tokens)


def kv_cache_bytes_per_gpu(model: ModelSpec, *, batch: int, context: int, kv_bytes: float,
                           shard: ShardPlan, block_tokens: int = DEFAULT_KV_BLOCK_TOKENS,
                           source_len: Optional[int] = None) -> float:
    """The KV cache of ``batch`` sequences of ``context`` tokens on one GPU.

    Decoder-only: every layer caches every token, sliding-window layers at most ``window``
    tokens. Encoder-decoder (T5/BART): the decoder's self-attention caches ``context`` (target)
    tokens and its cross-attention caches the encoder output's K/V of ``source_len`` tokens
    (computed once per request); the encoder caches nothing. Layers split over ``pp``.
    """
    per_layer = kv_bytes_per_token_per_layer(model, kv_bytes, tp=shard.tp)
    if model.is_encoder_decoder:
        dec = model.num_decoder_layers
        src = source_len if source_len is not None else context
        tokens = dec * (paged_tokens(context, block_tokens) + paged_tokens(src, block_tokens))
        return batch * tokens * per_layer / shard.pp
    local = sliding_layers(model)
    cross = cross_attention_layers(model)
    full_layers = model.num_layers - local - cross
    window_tokens = min(context, model.sliding_window or context)
    tokens = full_layers * paged_tokens(context, block_tokens) \
        + local * paged_tokens(window_tokens, block_tokens)
    # Llama-3.2-Vision: cross-attention layers cache the image tokens, not the text (a model
    # has cross-attention layers only with a vision side: cross_attention_layers)
    if cross and model.vision is not None:
        tokens += cross * paged_tokens(model.vision.tokens_per_image, block_tokens)
    return batch * tokens * per_layer / shard.pp


def cross_attention_layers(model: ModelSpec) -> int:
    """Decoder-only VLM layers that cross-attend to image tokens instead of self-attending
    (Llama-3.2-Vision's ``cross_attention_layers``); 0 for other models."""
    if model.vision is None:
        return 0
    return sum(lin.layers for lin in model.linears
               if lin.kind == "cross_attention" and lin.name == "q_proj")


def prefill_activation_bytes(model: ModelSpec, *, chunk_tokens: int, max_seqs: int,
                             act_bytes: float, shard: ShardPlan) -> float:
    """Peak transient memory of a forward pass over ``chunk_tokens`` tokens (no activations
    are kept for backward): the larger of the attention and MLP working sets of one layer, plus
    fp32 logits of the last token of up to ``max_seqs`` sequences.

    Attention phase: residual, normed input and output (3 x hidden) + q/k/v (+ attention output)
    per TP rank; MLP phase: residual and normed input (2 x hidden) + gate/up (2 x intermediate) +
    their product, per TP rank; MoE layers route a token through top-k experts
    (Pope et al. 2022, "Efficiently Scaling Transformer Inference", section 3.1: inference keeps
    one layer's activations at a time).
    """
    hidden = model.hidden_size
    q_dim = model.num_attention_heads * model.head_dim
    kv_dim = 2 * model.num_kv_heads * model.head_dim
    attention = 3 * hidden + (2 * q_dim + kv_dim) / shard.tp
    inter = model.intermediate_size
    if model.is_moe:  # each token passes top-k experts; dense layers (if any) the full MLP
        inter = max(model.moe_intermediate_size * model.experts_per_token,
                    model.intermediate_size if model.num_moe_layers < model.num_layers else 0)
    mlp = 2 * hidden + (3 if model.gated_mlp else 2) * inter / shard.tp
    per_token = max(attention, mlp) * act_bytes
    logits = min(max_seqs, chunk_tokens) * model.vocab_size * LOGIT_BYTES
    return chunk_tokens * per_token + logits


@frozen(kw_only=True)
class InferenceMemory:
    """Per-GPU bytes of a serving configuration, and what it leaves free."""

    weights_bytes: float
    kv_cache_bytes: float
    activation_bytes: float
    cuda_graph_bytes: float
    non_torch_bytes: float
    capacity_bytes: float
    usable_bytes: float           # capacity x gpu_memory_utilization (1 - safety margin)

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.kv_cache_bytes + self.activation_bytes
                + self.cuda_graph_bytes + self.non_torch_bytes)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.usable_bytes

    @property
    def free_for_kv_bytes(self) -> float:
        """What the server would hand to the KV cache (vLLM: "Available KV cache memory")."""
        return self.usable_bytes - (self.total_bytes - self.kv_cache_bytes)


@frozen(kw_only=True)
class ServingSetup:
    """Everything besides the model that sizes inference memory."""

    batch: int
    context: int
    weight_format: str = "bf16"
    kv_format: str = "bf16"
    act_bytes: float = 2.0
    shard: ShardPlan = ShardPlan()
    block_tokens: int = DEFAULT_KV_BLOCK_TOKENS
    chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS
    max_seqs: int = DEFAULT_MAX_NUM_SEQS
    group_size: int = DEFAULT_GROUP_SIZE
    cuda_graphs: bool = True
    source_len: Optional[int] = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    runtime: str = "vllm"
    #: prompt tokens per sequence (the prefill); None = the whole context
    prompt_tokens: Optional[int] = None


def full_prompt_logits_bytes(model: ModelSpec, *, tokens: int, act_bytes: float,
                             shard: ShardPlan) -> float:
    """``transformers`` generate: the first forward pass computes logits for every prompt token
    in the compute dtype and upcasts them to fp32 (both alive at the peak)."""
    return tokens * model.vocab_size * (act_bytes + LOGIT_BYTES) / shard.tp


def _weights_bytes(model: ModelSpec, setup: ServingSetup) -> float:
    return weight_bytes_per_gpu(model, setup.weight_format, shard=setup.shard,
                                group_size=setup.group_size, unquantized_bytes=setup.act_bytes)


def inference_memory(model: ModelSpec, setup: ServingSetup, *,
                     capacity_bytes: float) -> InferenceMemory:
    """Assemble the per-GPU inference memory of ``model`` served as ``setup``."""
    kv_bytes = KV_FORMAT_BYTES[setup.kv_format]
    if setup.runtime == "transformers":
        return _transformers_memory(model, setup, kv_bytes, capacity_bytes)
    chunk = min(setup.chunk_tokens, max(setup.context, 1) * setup.batch)
    return InferenceMemory(
        weights_bytes=_weights_bytes(model, setup),
        kv_cache_bytes=kv_cache_bytes_per_gpu(model, batch=setup.batch, context=setup.context,
                                              kv_bytes=kv_bytes, shard=setup.shard,
                                              block_tokens=setup.block_tokens,
                                              source_len=setup.source_len),
        activation_bytes=prefill_activation_bytes(model, chunk_tokens=chunk,
                                                  max_seqs=min(setup.max_seqs, setup.batch),
                                                  act_bytes=setup.act_bytes, shard=setup.shard),
        cuda_graph_bytes=CUDA_GRAPH_BYTES if setup.cuda_graphs else 0.0,
        non_torch_bytes=NON_TORCH_BYTES,
        capacity_bytes=capacity_bytes,
        usable_bytes=capacity_bytes * setup.gpu_memory_utilization)


def _largest(fits: Callable[[int], bool], low: int, high: int) -> int:
    """Largest integer in [low, high] with ``fits(n)`` true (``fits`` monotone), or 0."""
    if not fits(low):
        return 0
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def max_batch(model: ModelSpec, setup: ServingSetup, *, capacity_bytes: float,
              limit: int = 1 << 20) -> int:
    """Most concurrent sequences of ``setup.context`` tokens that fit (0 when none)."""
    import attrs

    return _largest(lambda n: inference_memory(model, attrs.evolve(setup, batch=n),
                                               capacity_bytes=capacity_bytes).fits, 1, limit)


def max_context(model: ModelSpec, setup: ServingSetup, *, capacity_bytes: float,
                limit: int = 1 << 24) -> int:
    """Longest context (tokens per sequence) that fits at ``setup.batch`` sequences (0 when
    none); may exceed the model's trained context, which the caller reports."""
    import attrs

    return _largest(lambda n: inference_memory(model, attrs.evolve(setup, context=n),
                                               capacity_bytes=capacity_bytes).fits, 1, limit)


def _transformers_memory(model: ModelSpec, setup: ServingSetup, kv_bytes: float,
                         capacity_bytes: float) -> InferenceMemory:
    """``model.generate`` in transformers: nothing pre-allocated, no paging, one prefill pass
    over every prompt token with full-prompt logits (see ``RUNTIMES``)."""
    prompt = setup.prompt_tokens if setup.prompt_tokens is not None else setup.context
    prefill_tokens = setup.batch * max(prompt, 1)
    activations = prefill_activation_bytes(model, chunk_tokens=prefill_tokens, max_seqs=0,
                                           act_bytes=setup.act_bytes, shard=setup.shard) \
        + full_prompt_logits_bytes(model, tokens=prefill_tokens, act_bytes=setup.act_bytes,
                                   shard=setup.shard)
    return InferenceMemory(
        weights_bytes=_weights_bytes(model, setup),
        kv_cache_bytes=kv_cache_bytes_per_gpu(model, batch=setup.batch, context=setup.context,
                                              kv_bytes=kv_bytes, shard=setup.shard,
                                              block_tokens=1, source_len=setup.source_len),
        activation_bytes=activations, cuda_graph_bytes=0.0, non_torch_bytes=NON_TORCH_BYTES,
        capacity_bytes=capacity_bytes,
        usable_bytes=capacity_bytes * setup.gpu_memory_utilization)


# ---------------------------------------------------------------------------------------------
# job -> estimate (the plugin's ``fmest_estimate_memory`` calls this when job.mode is inference)
# ---------------------------------------------------------------------------------------------

#: ``--dtype`` -> weight storage format; ``inference.quantization`` (gptq/awq/int4) overrides it
_DTYPE_FORMAT = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8",
                 "nf4": "nf4"}


def serving_setup(job: Job, ctx: EstimateContext) -> ServingSetup:
    """The :class:`ServingSetup` of a job in inference mode (fields documented in
    docs/inference.md and :class:`fmest.job.Inference`)."""
    inf = job.inference
    dtype = job.training.dtype
    weight_format = inf.quantization if inf.quantization != "none" else _DTYPE_FORMAT[dtype]
    act_bytes = 4.0 if dtype == "fp32" else 2.0
    kv_format = inf.kv_dtype if inf.kv_dtype != "auto" else (
        "fp32" if dtype == "fp32" else "fp16" if dtype == "fp16" else "bf16")
    layout = ctx.layout
    # a VLM's prompt also holds the image tokens (``images_per_sample`` images per request)
    context = vlm_sequence_len(inf.context, ctx.model.vision, image_size=job.training.image_size,
                               images=job.training.images_per_sample)
    return ServingSetup(
        batch=inf.batch, context=context,
        prompt_tokens=max(1, context - inf.output_tokens), weight_format=weight_format,
        kv_format=kv_format, act_bytes=act_bytes,
        shard=ShardPlan(tp=layout.tp, pp=layout.pp, ep=layout.ep),
        block_tokens=inf.kv_block_size, chunk_tokens=inf.max_num_batched_tokens,
        max_seqs=inf.max_num_seqs, group_size=inf.group_size, cuda_graphs=inf.cuda_graphs,
        source_len=job.training.source_len, runtime=inf.runtime,
        gpu_memory_utilization=inf.gpu_memory_utilization)


def estimate_inference_memory(job: Job, ctx: EstimateContext) -> MemoryEstimate:
    """A :class:`fmest.estimates.MemoryEstimate` for serving: components ``weights``,
    ``kv_cache``, ``activations``, ``cuda_graphs``, ``cuda_context``; the notes give the
    largest batch at the job's context and the largest context at its batch."""
    from fmest.estimates import MemoryEstimate, Provenance

    model, setup = ctx.model, serving_setup(job, ctx)
    capacity = float(ctx.gpu.memory_bytes)
    mem = inference_memory(model, setup, capacity_bytes=capacity)
    components = {"weights": int(mem.weights_bytes), "kv_cache": int(mem.kv_cache_bytes),
                  "activations": int(mem.activation_bytes),
                  "cuda_graphs": int(mem.cuda_graph_bytes),
                  "cuda_context": int(mem.non_torch_bytes)}
    notes = [f"inference ({setup.runtime}): weights as {setup.weight_format}, KV cache as "
             f"{setup.kv_format}, {setup.batch} sequence(s) x {setup.context} tokens",
             f"usable memory = {setup.gpu_memory_utilization:g} x capacity "
             f"({mem.usable_bytes / GIB:.1f} GiB; gpu_memory_utilization)"]
    metrics: dict[str, float] = {}
    if model.model_type != "weights_only":  # a weights-only model has no KV cache to size
        batch = max_batch(model, setup, capacity_bytes=capacity)
        context = max_context(model, setup, capacity_bytes=capacity)
        metrics.update(max_batch=batch, max_context=context)
        notes += [f"largest batch at {setup.context} tokens: {batch}",
                  f"largest context at batch {setup.batch}: {context} tokens"
                  + (f" (beyond the model's {model.max_position_embeddings} positions)"
                     if context > model.max_position_embeddings else "")]
    return MemoryEstimate(
        total_bytes=int(sum(components.values())), components=components,
        provenance=Provenance(basis="analytic", detail="inference memory: weights in storage "
                              "format + paged KV cache + prefill working set + runtime reserve"),
        phase="decode", phase_peaks_bytes={"decode": int(sum(components.values()))},
        notes=tuple(notes),
        metrics={**metrics, "usable_bytes": mem.usable_bytes,
                 "free_for_kv_bytes": mem.free_for_kv_bytes,
                 "context_tokens": setup.context})
