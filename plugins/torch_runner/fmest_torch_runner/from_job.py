"""A job becomes a :class:`~fmest_torch_runner.records.RunSpec`: what the runner can execute,
the precision policy and the dtypes it builds, the optimizer, and whether FSDP2 can be traced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from fmest.physics.counting import LORA_TECHNIQUES, default_lora_targets
from fmest_torch_runner.optimizer import optimizer_choice
from fmest_torch_runner.records import RunSpec, Unsupported

if TYPE_CHECKING:
    from fmest.job import Job, Training
    from fmest.models import ModelSpec
    from fmest.transforms import ShardingStrategy


def resolve_precision(training: Training, sharding: Optional[ShardingStrategy] = None) -> str:
    """Core's rule (:func:`fmest.physics.precision.resolve_precision`, shared with the memory and time
    plugins; the engine resolves it into ``ctx.transforms.precision``) for ``precision="auto"``;
    without a sharding strategy, one that shards nothing (a single GPU or DDP).

    What the runner builds: ``pure`` = everything in ``dtype`` (LoRA adapters too); ``amp`` =
    full: fp32 weights + ``torch.autocast(dtype)``, LoRA: base in ``dtype``, adapters fp32
    (peft ``autocast_adapter_dtype``) + autocast; ``master`` = ``dtype`` weights and grads +
    an fp32 master copy the optimizer updates."""
    from fmest.physics.precision import resolve_precision as rule
    from fmest.transforms import ShardingStrategy

    return rule(training, sharding if sharding is not None else ShardingStrategy(name="none"))


def _check_runnable(job: Job, spec: ModelSpec, device: str) -> None:
    """Raise :class:`Unsupported` naming what the runner cannot execute for ``job``."""
    tr = job.training
    if not spec.hf_config:
        raise Unsupported(f"model {spec.name!r} has no hf_config to build it from")
    if tr.dtype == "fp8":
        raise Unsupported("fp8 training (torchao float8) is not run by the torch runner")
    if tr.objective != "lm":
        raise Unsupported(f"objective {tr.objective!r}: the torch runner runs the causal-LM "
                          "step only (no preference pairs, reference or KL passes)")
    if tr.technique == "qlora" and device != "cuda":
        raise Unsupported("QLoRA (bitsandbytes 4-bit) is not supported on this device "
                          f"({device}); it needs CUDA")
    if tr.activation_checkpointing == "selective":
        raise Unsupported("selective activation checkpointing has no transformers switch")
    if tr.loss != "standard":
        raise Unsupported(f"loss {tr.loss!r} (only the standard transformers loss is run)")
    for flag in ("activation_offload", "optimizer_in_backward", "compile"):
        if getattr(tr, flag):
            raise Unsupported(f"training.{flag} is not run by the torch runner")
    if job.parallelism.cpu_offload != "none":
        raise Unsupported("CPU offload is not run by the torch runner")


def _weight_dtypes(training: Training, precision: str) -> tuple[str, Optional[str]]:
    """(dtype the weights are built in, autocast dtype or None) under ``precision``."""
    half = None if training.dtype == "fp32" else training.dtype
    if precision == "pure":
        return training.dtype, None
    if precision == "amp" and training.technique != "full":
        return training.dtype, half  # frozen base stays in dtype
    if precision == "amp":
        return "fp32", half
    return training.dtype, None  # master: dtype weights/grads + fp32 master copy and states


#: LoRA target names of a remote-code model -> the names of its restatement's modules (the
#: transformers model the runner instantiates instead): Qwen v1's fused ``c_attn`` becomes
#: Qwen2's q/k/v projections (three adapters where the real model has one: the traced memory
#: of a ``c_attn`` adapter counts three rank-r inputs instead of one), its attention and MLP
#: ``c_proj`` o/down, ``w1`` up and ``w2`` the gate (``a1 * F.silu(a2)``); likewise ChatGLM's
#: and Baichuan's fused projections.
RESTATED_TARGETS: dict[str, dict[str, tuple[str, ...]]] = {
    "qwen": {"c_attn": ("q_proj", "k_proj", "v_proj"), "c_proj": ("o_proj", "down_proj"),
             "w1": ("up_proj",), "w2": ("gate_proj",)},
    # ChatGLM: fused q/k/v, ``dense`` out, fused gate/up, down
    "chatglm": {"query_key_value": ("q_proj", "k_proj", "v_proj"), "dense": ("o_proj",),
                "dense_h_to_4h": ("gate_proj", "up_proj"), "dense_4h_to_h": ("down_proj",)},
    # Baichuan: fused q/k/v; the rest keeps Llama's names
    "baichuan": {"W_pack": ("q_proj", "k_proj", "v_proj")}}


def _instantiable(spec: ModelSpec, targets: tuple) -> tuple[dict, tuple]:
    """``(hf_config, LoRA targets)`` the runner can build: the spec's own config, or for a
    remote-code preset built from its upstream config (``fmest.models.presets.RESTATED_KEY``)
    the restatement in a transformers model type, with the targets renamed to its modules."""
    from fmest.models.presets import RESTATED_KEY

    cfg = dict(spec.hf_config)
    restated = cfg.pop(RESTATED_KEY, None)
    if not isinstance(restated, dict):
        return cfg, targets
    names = RESTATED_TARGETS.get(str(cfg.get("model_type")), {})
    mapped: list[str] = []
    for t in targets:
        for n in names.get(t, (t,)):
            if n not in mapped:
                mapped.append(n)
    return dict(restated), tuple(mapped)


def run_spec_from_job(job: Job, spec: ModelSpec, *, optimizer_name: Optional[str] = None,
                      device: str = "fake", sharding: Optional[ShardingStrategy] = None,
                      fsdp_world_size: int = 1, precision: Optional[str] = None,
                      alloc_conf: str = "") -> RunSpec:
    """The :class:`RunSpec` of ``job`` on ``spec`` (a :class:`fmest.models.ModelSpec` with
    ``hf_config``). Raises :class:`Unsupported` naming what the runner cannot execute.

    ``precision``: the resolved policy (``ctx.transforms.precision``); without it the core rule
    runs with ``sharding``. ``fsdp_world_size > 1`` asks for a traced FSDP2 full-shard run (see
    :func:`fsdp_traceable`); it raises :class:`Unsupported` when the job cannot be traced so.
    ``alloc_conf``: the ``PYTORCH_CUDA_ALLOC_CONF`` the allocator replay follows ("" = default)."""
    tr = job.training
    _check_runnable(job, spec, device)
    opt, impl = optimizer_choice(tr, optimizer_name)
    precision = precision or resolve_precision(tr, sharding)
    param_dtype, autocast = _weight_dtypes(tr, precision)
    attention = tr.attention
    if spec.eager_only and attention == "sdpa":
        attention = "eager"
    targets = tuple(tr.lora_target_modules) or (
        default_lora_targets(spec) if tr.technique in LORA_TECHNIQUES else ())
    hf_config, targets = _instantiable(spec, targets)
    return RunSpec(
        hf_config=hf_config, model_name=spec.name, param_dtype=param_dtype,
        autocast_dtype=autocast, precision=precision, technique=tr.technique,
        lora_rank=tr.lora_rank, lora_alpha=tr.lora_alpha,
        # empty = PEFT's default for the model type (a job that skipped Engine.resolve_job)
        lora_targets=targets,
        quantization_bits=tr.quantization_bits,
        double_quantization=tr.double_quantization,
        gradient_checkpointing=tr.activation_checkpointing == "full", attention=attention,
        optimizer=opt, optimizer_impl=impl, seq_len=tr.seq_len,
        micro_batch_size=tr.micro_batch_size, micro_batches=min(tr.grad_accum_steps, 2),
        fsdp_world_size=_check_fsdp(fsdp_world_size, device, precision, tr.technique),
        source_len=tr.source_len, target_len=tr.target_len,
        images_per_sample=tr.images_per_sample, train_vision_tower=tr.train_vision_tower,
        alloc_conf=alloc_conf)


def fsdp_traceable(job: Job, sharding: ShardingStrategy, world_size: int, *,
                   precision: str, device: str = "fake") -> Optional[str]:
    """None when ``job`` with ``sharding`` over ``world_size`` ranks can be traced with FSDP2
    on a fake process group, else the reason it cannot. ``precision``: the engine's resolved
    policy (``ctx.transforms.precision``: the training stack decides before the strategy)."""
    if device != "fake":
        return f"FSDP2 tracing is fake-mode only (device {device})"
    if world_size <= 1:
        return "world size 1"
    if not sharding.gathers_full_shard:
        return (f"sharding {sharding.name!r} is not traced (only strategies that shard "
                "parameters, gradients and optimizer states and gather per layer, as FSDP2 "
                "fully_shard does)")
    if job.training.technique != "full":
        return f"technique {job.training.technique!r} under FSDP is not traced"
    if precision not in ("pure", "amp"):
        return f"precision {precision!r} under FSDP is not traced"
    return None


def _check_fsdp(world_size: int, device: str, precision: str, technique: str) -> int:
    if world_size <= 1:
        return 1
    if device != "fake":
        raise Unsupported(f"FSDP2 tracing is fake-mode only (device {device})")
    if technique != "full" or precision not in ("pure", "amp"):
        raise Unsupported(f"FSDP2 tracing supports full fine-tuning with pure/amp precision "
                          f"(got {technique}, {precision})")
    return int(world_size)
