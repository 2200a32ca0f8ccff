"""Bounds and conflict rules: what fmest refuses, and why, as data.

Three tables, each row with its reason (and a source where the rule comes from a framework or
a datasheet), checked by small functions that raise :class:`fmest.errors.InputError` naming
the field:

* :data:`BOUNDS` -- the largest value a job field may take. Beyond it the number is a typo
  or a unit slip (``1e30`` tokens), never a run; the limits sit far above anything published.
* :data:`CONFLICTS` -- settings that contradict each other (a LoRA rank for full fine-tuning,
  ZeRO-3 with pipeline parallelism): the run cannot exist, or a setting would be silently
  dropped.
* :data:`FLAG_CONFLICTS` -- command-line flags that set the same field two ways
  (``--lora --qlora``).

Checks that need the resolved model or GPU (:func:`check_context`): the GPU's capabilities
from the GPU table (fp8/bf16 units, FlashAttention-2 support, see ``fmest/data/README.md``), a
learned position table's length, the model's dimensions, pipeline chunks and HSDP groups.

:func:`answer_problem` is the engine's check of a plugin's answer (finite, non-negative,
components summing to the total). :func:`markdown` renders the tables for ``docs/cli.md``.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Any, Callable, Iterable, Optional

import attrs
from attrs import frozen

from fmest.errors import InputError

# -- bounds ---------------------------------------------------------------------------------


@frozen(kw_only=True)
class Bound:
    """``path`` may be at most ``maximum``; ``reason`` says why that limit."""

    path: str
    maximum: float
    reason: str


_GPUS = ("the largest published training clusters hold about 100,000 GPUs (xAI Colossus, "
         "Meta's 2 x 24,576-GPU clusters); 2^20 leaves a 10x margin")
BOUNDS: tuple[Bound, ...] = (
    Bound(path="training.seq_len", maximum=2**24,
          reason="16,777,216 tokens: above the longest published context (Llama 4 Scout, 10M "
                 "tokens, Meta AI blog 2025-04-05); the s^2 attention terms of longer "
                 "sequences overflow every memory"),
    Bound(path="training.micro_batch_size", maximum=2**20,
          reason="a million sequences per GPU per micro-batch is a typo for the global batch"),
    Bound(path="training.grad_accum_steps", maximum=2**20,
          reason="a million micro-batches per optimizer step is not a training schedule"),
    Bound(path="training.lora_rank", maximum=2**16,
          reason="a rank above the widest published hidden size (Megatron 1T, 25,600) adapts "
                 "nothing more; the model check also refuses a rank above the hidden size"),
    Bound(path="training.lora_alpha", maximum=1e6,
          reason="a scale factor; a million is a unit slip"),
    Bound(path="parallelism.dp", maximum=2**20, reason=_GPUS),
    Bound(path="parallelism.tp", maximum=2**20, reason=_GPUS),
    Bound(path="parallelism.pp", maximum=2**20, reason=_GPUS),
    Bound(path="parallelism.cp", maximum=2**20, reason=_GPUS),
    Bound(path="parallelism.ep", maximum=2**20, reason=_GPUS),
    Bound(path="parallelism.expert_tp", maximum=2**20, reason=_GPUS),
    Bound(path="parallelism.pp_virtual_stages", maximum=2**16,
          reason="model chunks per stage; no model has 65,536 layers"),
    Bound(path="parallelism.hsdp_shard_size", maximum=2**20, reason=_GPUS),
    Bound(path="hardware.gpus_per_node", maximum=16384,
          reason="a node is one scale-up domain; the largest is a TPU v5p pod (8,960 chips "
                 "over ICI, cloud.google.com/tpu/docs/v5p)"),
    Bound(path="hardware.nodes", maximum=2**20, reason=_GPUS),
    Bound(path="workload.dataset_tokens", maximum=1e15,
          reason="about 28x the largest published pre-training corpus (Qwen3, 36T tokens, "
                 "arXiv:2505.09388)"),
    Bound(path="workload.num_samples", maximum=1e13,
          reason="ten trillion samples is above any published corpus at one token each"),
    Bound(path="workload.avg_seq_len", maximum=2**24, reason="the training.seq_len bound"),
    Bound(path="workload.epochs", maximum=1e5,
          reason="a hundred thousand passes over a dataset is a typo for steps"),
    Bound(path="workload.max_steps", maximum=1e10,
          reason="ten billion optimizer steps is ~300 years at one step per second"),
    Bound(path="training.source_len", maximum=2**24, reason="the training.seq_len bound"),
    Bound(path="training.target_len", maximum=2**24, reason="the training.seq_len bound"),
    Bound(path="training.image_size", maximum=2**16,
          reason="pixels per image side; 65,536 is 18x the largest native input of a shipped "
                 "vision tower (Qwen2-VL max_pixels 16384 x 28 x 28, about 3,584 px square)"),
    Bound(path="training.images_per_sample", maximum=2**16,
          reason="65,536 images of at least 64 tokens each fill the training.seq_len bound"),
    Bound(path="inference.batch", maximum=2**20,
          reason="a million concurrent sequences per replica is above any serving engine's "
                 "scheduler (vLLM max_num_seqs default 256)"),
    Bound(path="inference.context", maximum=2**24, reason="the training.seq_len bound"),
    Bound(path="inference.output_tokens", maximum=2**24, reason="the training.seq_len bound"),
    Bound(path="inference.kv_block_size", maximum=2**16,
          reason="tokens per paged KV block; vLLM takes 1 to 256 (its block_size choices), "
                 "65,536 is a unit slip"),
    Bound(path="inference.group_size", maximum=2**16,
          reason="weights per GPTQ/AWQ scale; published groups are 32 to 128, 65,536 is wider "
                 "than any layer's input"),
    Bound(path="inference.max_num_batched_tokens", maximum=2**30,
          reason="tokens per prefill chunk; 2^30 is 64x the training.seq_len bound"),
    Bound(path="inference.max_num_seqs", maximum=2**20, reason="the inference.batch bound"),
    Bound(path="calibration.activation_factor", maximum=100.0,
          reason="a correction factor on the activations; a measured factor above 100 is a "
                 "unit slip (bytes for MiB), not a calibration"),
    Bound(path="calibration.fragmentation_gib", maximum=16384.0,
          reason="GiB added per GPU; 16 TiB is 50x the largest GPU memory in the table (B300, "
                 "288 GB): more is a unit slip (MiB for GiB)"),
    Bound(path="calibration.misc_overhead_gib", maximum=16384.0,
          reason="GiB added per GPU; 16 TiB is 50x the largest GPU memory in the table (B300, "
                 "288 GB): more is a unit slip (MiB for GiB)"),
    Bound(path="hardware.inter_node_gbps", maximum=1e5,
          reason="Gb/s per GPU between nodes; the fastest NICs in the GPU table give 800 "
                 "(ConnectX-8), 100,000 is a unit slip (Mb/s for Gb/s, or per rack)"),
    Bound(path="pricing.price_per_gpu_hour", maximum=1000.0,
          reason="USD per GPU-hour; the dearest rate in the shipped price table is 17.80 "
                 "(AWS p6-b300 on demand), 1000 is a unit slip (per instance, per month)"),
    Bound(path="pricing.startup_overhead_hours", maximum=1e5,
          reason="hours; 100,000 hours is eleven years"),
    Bound(path="pricing.checkpoint_overhead_fraction", maximum=10.0,
          reason="a fraction of the training time; above 10 checkpointing is the job"),
)


#: the paths of :data:`BOUNDS`, in order
_BOUND_PATHS = tuple(bound.path for bound in BOUNDS)


@functools.lru_cache(maxsize=None)
def _parts(path: str) -> tuple[str, ...]:
    return tuple(path.split("."))


#: dotted path -> its compiled getter (``operator.attrgetter`` walks "a.b" in C)
_GETTERS: dict[str, Callable[[Any], Any]] = {}


def _get(job, path: str) -> Any:
    getter = _GETTERS.get(path)
    if getter is None:
        getter = _GETTERS[path] = operator.attrgetter(path)
    return getter(job)


#: the longest path component Linux accepts (NAME_MAX); a model name with a longer one can be
#: neither a local path nor a Hub id (at most 96 characters, huggingface_hub validators)
NAME_MAX = 255


def check_model_name(name: str) -> None:
    """Refuse a model name that cannot name a preset, a local path or a Hub id (a path
    component longer than NAME_MAX: the file system would raise ``File name too long``)."""
    longest = max((len(part.encode("utf-8", "replace")) for part in name.split("/")), default=0)
    if longest > NAME_MAX or "\0" in name:
        raise InputError("model", f"not a preset name, local path or Hub id: a path component "
                         f"is at most {NAME_MAX} bytes (Linux NAME_MAX) and may not hold NUL",
                         value=name[:60] + ("..." if len(name) > 60 else ""))


def _shown(number: float) -> str:
    return f"{int(number):,}" if float(number).is_integer() and number < 1e12 else f"{number:g}"


#: job fields that name something (a registry entry, a file); an empty name names nothing
NAMED_FIELDS = ("training.optimizer", "training.stack", "parallelism.sharding", "hardware.gpu",
                "workload.dataset_path", "pricing.provider", "pricing.region", "options.method",
                "options.learned_model")


def check_names(job) -> None:
    """Refuse an empty name (``--stack ""``): it names no registry entry or file, and was
    taken as the default without a word."""
    for path, value in zip(NAMED_FIELDS, _all_of(NAMED_FIELDS)(job), strict=True):
        if isinstance(value, str) and not value.strip():
            raise InputError(path, "an empty name names nothing; give a name or leave the "
                             "field out", value=value)


@functools.lru_cache(maxsize=8)
def _all_of(paths: tuple[str, ...]) -> Callable[[Any], tuple]:
    """One getter of every dotted path in ``paths`` (``operator.attrgetter`` of several paths
    returns their values as a tuple in one C call: the bounds are checked on every estimate,
    and a getter per path cost most of the check)."""
    return operator.attrgetter(*paths) if len(paths) > 1 else \
        (lambda obj: (operator.attrgetter(*paths)(obj),))


def check_bounds(job) -> None:
    """Refuse a value above its documented bound (:data:`BOUNDS`) and an empty name."""
    check_model_name(job.model)
    check_names(job)
    for bound, value in zip(BOUNDS, _all_of(_BOUND_PATHS)(job), strict=True):
        if value is not None and value > bound.maximum:
            raise InputError(bound.path, f"above the bound {_shown(bound.maximum)} "
                             f"({bound.reason})",
                             value=value)


# -- conflict rules ---------------------------------------------------------------------------


@frozen(kw_only=True)
class Conflict:
    """Settings that contradict each other. ``fields`` are the paths involved (the first is
    the one the error names), ``applies(job, given)`` says whether the job breaks the rule
    (``given(path)``: the field differs from its default), ``message`` what is wrong,
    ``reason`` why."""

    name: str
    fields: tuple[str, ...]
    applies: Callable[[Any, Callable[[str], bool]], bool]
    message: str
    reason: str


def _sharded(job) -> bool:
    par = job.parallelism
    return par.zero_stage > 0 or par.fsdp != "none"


CONFLICTS: tuple[Conflict, ...] = (
    Conflict(name="lora settings without lora",
             fields=("training.lora_rank", "training.lora_alpha",
                     "training.lora_target_modules", "training.technique"),
             applies=lambda job, given: job.training.technique == "full" and (
                 given("training.lora_rank") or given("training.lora_alpha")
                 or given("training.lora_target_modules")),
             message="LoRA rank/alpha/target modules given, but training.technique is full",
             reason="full fine-tuning trains every weight and has no adapters; the setting "
                    "would be ignored (set technique lora or qlora, or drop it)"),
    Conflict(name="quantization without qlora",
             fields=("training.quantization_bits", "training.double_quantization",
                     "training.technique"),
             applies=lambda job, given: job.training.technique not in (
                 "qlora", "qadapter", "qadapter_v2") and (
                 given("training.quantization_bits") or given("training.double_quantization")),
             message="quantization bits / double quantization given, but training.technique "
                     "is not a quantized-base technique (qlora, qadapter, qadapter_v2)",
             reason="only QLoRA (Dettmers et al. 2023, arXiv:2305.14314) and the adapters on a "
                    "quantized base store the frozen base weights quantized; lora, adapter and "
                    "full keep them in training.dtype"),
    Conflict(name="virtual stages without interleaving",
             fields=("parallelism.pp_virtual_stages", "parallelism.pp_schedule"),
             applies=lambda job, given: job.parallelism.pp_virtual_stages > 1 and (
                 job.parallelism.pp_schedule != "interleaved" or job.parallelism.pp < 2),
             message="more than one model chunk per stage needs pp_schedule interleaved and pp > 1",
             reason="virtual pipeline stages exist only in the interleaved 1F1B schedule "
                    "(Narayanan et al. 2021, arXiv:2104.04473, sec. 2.2.2)"),
    Conflict(name="hsdp shard size without hybrid_shard",
             fields=("parallelism.hsdp_shard_size", "parallelism.fsdp"),
             applies=lambda job, given: job.parallelism.hsdp_shard_size is not None
             and job.parallelism.fsdp != "hybrid_shard",
             message="a shard group size is given, but parallelism.fsdp is not hybrid_shard",
             reason="only HYBRID_SHARD has a shard group smaller than the data-parallel group "
                    "(PyTorch FSDP ShardingStrategy docs)"),
    Conflict(name="sequence parallel without tensor parallel",
             fields=("parallelism.sequence_parallel", "parallelism.tp"),
             applies=lambda job, given: job.parallelism.sequence_parallel
             and job.parallelism.tp == 1,
             message="sequence parallelism needs tp > 1",
             reason="Megatron sequence parallelism splits the tensor-parallel group's "
                    "LayerNorm/dropout activations (Korthikanti et al. 2022, arXiv:2205.05198); "
                    "with tp 1 there is no group"),
    Conflict(name="fsdp prefetch without fsdp",
             fields=("parallelism.fsdp_backward_prefetch", "parallelism.fsdp"),
             applies=lambda job, given: job.parallelism.fsdp == "none" and given(
                 "parallelism.fsdp_backward_prefetch"),
             message="an FSDP backward prefetch is given, but parallelism.fsdp is none",
             reason="backward_prefetch is an FSDP option (torch.distributed.fsdp.BackwardPrefetch)"),
    Conflict(name="optimizer offload without sharding",
             fields=("parallelism.cpu_offload", "parallelism.zero_stage", "parallelism.fsdp"),
             applies=lambda job, given: job.parallelism.cpu_offload != "none"
             and not _sharded(job),
             message="CPU offload needs ZeRO (zero_stage >= 1) or FSDP",
             reason="offload is a feature of DeepSpeed ZeRO (offload_optimizer, offload_param) "
                    "and FSDP (CPUOffload); plain DDP has none"),
    Conflict(name="parameter offload with zero 1/2",
             fields=("parallelism.cpu_offload", "parallelism.zero_stage"),
             applies=lambda job, given: job.parallelism.cpu_offload == "params"
             and job.parallelism.zero_stage in (1, 2),
             message="parameter offload needs ZeRO-3 (or FSDP)",
             reason="DeepSpeed: offload_param is 'available only with ZeRO stage 3' "
                    "(deepspeed.ai/docs/config-json, Parameter offloading)"),
    Conflict(name="zero 2/3 with pipeline parallelism",
             fields=("parallelism.zero_stage", "parallelism.pp"),
             applies=lambda job, given: job.parallelism.zero_stage >= 2
             and job.parallelism.pp > 1,
             message="ZeRO-2 and ZeRO-3 do not run with pipeline parallelism (use ZeRO-1, or FSDP)",
             reason="DeepSpeed's PipelineEngine asserts 'ZeRO-2 and ZeRO-3 are incompatible "
                    "with pipeline parallelism' (deepspeed/runtime/pipe/engine.py)"),
    Conflict(name="optimizer in backward with accumulation",
             fields=("training.optimizer_in_backward", "training.grad_accum_steps"),
             applies=lambda job, given: job.training.optimizer_in_backward
             and job.training.grad_accum_steps > 1,
             message="the optimizer step fused into backward cannot accumulate gradients",
             reason="each gradient is applied and freed as soon as it is computed; torchtune "
                    "raises 'Gradient accumulation is not supported with optimizer in bwd' "
                    "(recipes/full_finetune_single_device.py)"),
    Conflict(name="max steps with a dataset size",
             fields=("workload.max_steps", "workload.dataset_tokens", "workload.num_samples"),
             applies=lambda job, given: job.workload.max_steps is not None and (
                 job.workload.dataset_tokens is not None or job.workload.num_samples is not None),
             message="give max_steps or a dataset size (dataset_tokens / num_samples), not both",
             reason="a fixed step count overrides the dataset (HF TrainingArguments: max_steps "
                    "'overrides num_train_epochs'), so one of the two would be silently dropped"),
    Conflict(name="average sample longer than the sequence",
             fields=("workload.avg_seq_len", "training.seq_len"),
             applies=lambda job, given: job.workload.avg_seq_len is not None
             and job.workload.avg_seq_len > job.training.seq_len,
             message="the average sample is longer than training.seq_len",
             reason="samples are truncated or packed to seq_len tokens, so their average "
                    "cannot exceed it"),
    Conflict(name="zero and fsdp together",
             fields=("parallelism.zero_stage", "parallelism.fsdp"),
             applies=lambda job, given: job.parallelism.zero_stage > 0
             and job.parallelism.fsdp != "none",
             message="give either zero_stage (DeepSpeed) or fsdp (PyTorch FSDP), not both",
             reason="two implementations of sharded data parallelism; a run uses one"),
    Conflict(name="output longer than the context",
             fields=("inference.output_tokens", "inference.context"),
             applies=lambda job, given: job.inference.output_tokens > job.inference.context,
             message="more output tokens than inference.context",
             reason="the context is the prompt plus the output (vLLM max_model_len bounds "
                    "prompt + generated tokens), so the output cannot be longer than it"),
)


#: the class of ``attrs.Factory(...)`` defaults: attrs' stubs declare ``Factory`` as a function
#: returning what the factory makes, so mypy cannot take it as an ``isinstance`` class
_FACTORY: type[Any] = type(attrs.Factory(list))


def _given_fn(job) -> Callable[[str], bool]:
    """``given(path)``: the field differs from its default. A field left at (or set to) its
    default changes nothing, so it contradicts nothing; a job exported with every field
    (``job_to_dict``) reads back the same."""

    def check(path: str) -> bool:
        section, name = _parts(path)
        obj = getattr(job, section)
        return getattr(obj, name) != _default(type(obj), name)
    return check


#: (attrs class, field name) -> its default (:func:`_default`)
_DEFAULTS: dict[tuple[type, str], Any] = {}


def _default(cls: type, name: str) -> Any:
    """The default of field ``name`` of the attrs class ``cls`` (a factory's product)."""
    key = (cls, name)
    if key not in _DEFAULTS:
        default: Any = attrs.fields_dict(cls)[name].default
        _DEFAULTS[key] = default.factory() if isinstance(default, _FACTORY) else default
    return _DEFAULTS[key]


def check_conflicts(job) -> None:
    """Refuse a job breaking a rule of :data:`CONFLICTS`."""
    is_given = _given_fn(job)
    for rule in CONFLICTS:
        if rule.applies(job, is_given):
            # name the first field of the rule the user actually set
            named = next((p for p in rule.fields if is_given(p)), rule.fields[0])
            others = ", ".join(f"{p} = {_get(job, p)!r}" for p in rule.fields if p != named)
            raise InputError(named, f"{rule.message} ({others}): {rule.reason}",
                             value=_get(job, named))


def check_job(job) -> None:
    """Every check that needs only the job: bounds, then conflicts."""
    check_bounds(job)
    check_conflicts(job)


# -- legal but odd: answered with a warning ------------------------------------------------------


@frozen(kw_only=True)
class Oddity:
    """A setting the run ignores or another setting overrides: legal (a config file may carry
    it), so answered, with a warning naming the field. ``applies(job, given, model)`` as in
    :class:`Conflict`, with the resolved model."""

    name: str
    fields: tuple[str, ...]
    applies: Callable[[Any, Callable[[str], bool], Any], bool]
    message: str
    reason: str
    #: ``applies`` reads the job's resolved training-stack name (``""``: none) in place of the
    #: model (the engine resolves the stack; :func:`check_oddities` ``stack_name``)
    by_stack: bool = False


def _inference_given(job, given: Callable[[str], bool]) -> bool:
    # the whole section at its defaults (the common case, one comparison) gives nothing
    if job.inference == _default_section(type(job.inference)):
        return False
    return any(given(f"inference.{a.name}") for a in attrs.fields(type(job.inference)))


_SECTIONS: dict[type, Any] = {}


def _default_section(cls: type) -> Any:
    """A section of the job with every field at its default (one per class)."""
    if cls not in _SECTIONS:
        _SECTIONS[cls] = cls()
    return _SECTIONS[cls]


def _sized(workload) -> bool:
    return workload.dataset_tokens is not None or workload.num_samples is not None \
        or bool(workload.dataset_path)


ODDITIES: tuple[Oddity, ...] = (
    Oddity(name="epochs with max steps", fields=("workload.epochs", "workload.max_steps"),
           applies=lambda job, given, model: given("workload.epochs")
           and job.workload.max_steps is not None,
           message="ignored: workload.max_steps fixes the number of steps",
           reason="HF TrainingArguments: max_steps 'overrides num_train_epochs'"),
    Oddity(name="epochs without a dataset", fields=("workload.epochs",),
           applies=lambda job, given, model: given("workload.epochs")
           and job.workload.max_steps is None and not _sized(job.workload),
           message="ignored: no dataset size (dataset_tokens, num_samples, dataset_path) to "
                   "repeat",
           reason="total time is epochs x the dataset's steps; without a dataset only the "
                  "step is estimated"),
    Oddity(name="average length without a sample count", fields=("workload.avg_seq_len",),
           applies=lambda job, given, model: job.workload.avg_seq_len is not None
           and job.workload.num_samples is None,
           message="ignored: it sizes the dataset only with workload.num_samples",
           reason="tokens = num_samples x avg_seq_len x epochs; dataset_tokens and max_steps "
                  "need no average"),
    Oddity(name="lora dropout without lora", fields=("training.lora_dropout",),
           applies=lambda job, given, model: bool(job.training.lora_dropout)
           and job.training.technique not in ("lora", "qlora"),
           message="ignored: training.technique is not lora or qlora, there is no LoRA adapter "
                   "to drop out in front of",
           reason="PEFT LoraConfig.lora_dropout is an nn.Dropout on each LoRA adapter's input "
                  "(peft src/peft/tuners/lora/layer.py); full training and LitGPT adapters "
                  "have none"),
    Oddity(name="lora adapter dtype without lora", fields=("training.lora_adapter_dtype",),
           applies=lambda job, given, model: job.training.lora_adapter_dtype is not None
           and job.training.technique not in ("lora", "qlora"),
           message="ignored: training.technique is not lora or qlora, there is no LoRA adapter "
                   "to store",
           reason="the adapters' dtype sizes LoRA's trainable matrices, their gradients, "
                  "optimizer states and input copies; full training and LitGPT adapters have none"),
    Oddity(name="fused lora kernel without lora", fields=("training.fused_kernels",),
           applies=lambda job, given, model: "lora" in job.training.fused_kernels
           and job.training.technique not in ("lora", "qlora"),
           message="the 'lora' entry is ignored: training.technique is not lora or qlora, "
                   "there is no LoRA matmul chain to fuse",
           reason="fms-acceleration's fused LoRA kernels replace PEFT's adapter chain around "
                  "each adapted linear (fmest.stacks FUSED_KERNEL_BYTES); full training has "
                  "no adapters"),
    Oddity(name="k-bit preparation without a quantized base", fields=("training.kbit_prep",),
           applies=lambda job, given, model: job.training.kbit_prep not in (None, "none")
           and job.training.technique not in ("qlora", "qadapter", "qadapter_v2"),
           message="ignored: training.technique does not quantize the base (qlora, qadapter, "
                   "qadapter_v2)",
           reason="PEFT prepare_model_for_kbit_training casts and freezes a k-bit loaded "
                  "model (peft src/peft/utils/other.py); a bf16/fp32 base has nothing to "
                  "prepare"),
    Oddity(name="compiled loss without compile", fields=("training.compile_loss",),
           applies=lambda job, given, model: job.training.compile_loss is not None
           and (not job.training.compile or job.training.loss != "standard"),
           message="ignored: it needs training.compile true and training.loss standard",
           reason="torch.compile of the loss function fuses the standard cross-entropy's fp32 "
                  "upcast and log-softmax (torchtitan torchtitan/components/loss.py); an eager "
                  "step, and the chunked/fused losses, have their own kernels"),
    Oddity(name="masked softmax fusion without Megatron eager attention",
           fields=("training.masked_softmax_fusion",),
           applies=lambda job, given, stack_name: job.training.masked_softmax_fusion is not None
           and (job.training.attention != "eager" or not _fused_softmax_stack(stack_name)),
           message="ignored: it needs training.attention eager under a stack that runs "
                   "Megatron's FusedScaleMaskSoftmax (megatron-deepspeed)",
           reason="--no-masked-softmax-fusion switches Megatron's fused scale-mask-softmax "
                  "kernel off (megatron/model/fused_softmax.py); flash, SDPA and TE attention "
                  "kernels, and other stacks' eager attention, have no such kernel",
           by_stack=True),
    Oddity(name="modules to save without LoRA", fields=("training.lora_modules_to_save",),
           applies=lambda job, given, model: bool(job.training.lora_modules_to_save)
           and job.training.technique not in ("lora", "qlora"),
           message="ignored: training.technique is not lora or qlora",
           reason="PEFT's modules_to_save trains a copy of a module beside LoRA adapters "
                  "(peft src/peft/utils/other.py ModulesToSaveWrapper); full fine-tuning "
                  "trains every module already"),
    Oddity(name="checkpoint fraction without full checkpointing",
           fields=("training.checkpoint_fraction", "training.activation_checkpointing"),
           applies=lambda job, given, model: job.training.checkpoint_fraction is not None
           and job.training.activation_checkpointing != "full",
           message="ignored: training.activation_checkpointing is not full",
           reason="the fraction is the share of blocks under full (block-level) checkpointing "
                  "(Megatron --recompute-granularity full --recompute-method block, torchtitan "
                  "selective_ac_option N); selective (op-level) and no checkpointing have no "
                  "such share"),
    Oddity(name="pipeline schedule without a pipeline", fields=("parallelism.pp_schedule",),
           applies=lambda job, given, model: given("parallelism.pp_schedule")
           and job.parallelism.pp == 1,
           message="ignored: parallelism.pp is 1, there is no pipeline to schedule",
           reason="1F1B, GPipe and interleaved order the micro-batches between pipeline "
                  "stages (Narayanan et al. 2021, arXiv:2104.04473)"),
    Oddity(name="tensor-parallel overlap without tensor parallelism",
           fields=("parallelism.tp_comm_overlap", "parallelism.async_tp"),
           applies=lambda job, given, model: job.parallelism.tp == 1 and (
               bool(job.parallelism.tp_comm_overlap) or job.parallelism.async_tp),
           message="ignored: parallelism.tp is 1, there is no tensor-parallel communication to "
                   "overlap",
           reason="Megatron --tp-comm-overlap and torchtitan async TP overlap the TP group's "
                  "all-gather/reduce-scatter with GEMMs"),
    Oddity(name="distributed optimizer with ZeRO or FSDP",
           fields=("parallelism.distributed_optimizer", "parallelism.zero_stage",
                   "parallelism.fsdp"),
           applies=lambda job, given, model: job.parallelism.distributed_optimizer
           and _sharded(job),
           message="the zero_stage/fsdp sharding already shards the optimizer states; memory is "
                   "estimated for that strategy",
           reason="Megatron's distributed optimizer is ZeRO-1-style sharding of optimizer "
                  "states over data parallelism (Megatron-LM docs, distrib_optimizer.md)"),
    Oddity(name="image settings on a text model",
           fields=("training.images_per_sample", "training.image_size",
                   "training.train_vision_tower"),
           applies=lambda job, given, model: getattr(model, "vision", None) is None and (
               given("training.images_per_sample") or given("training.image_size")
               or given("training.train_vision_tower")),
           message="ignored: the model has no vision tower",
           reason="images are read only by vision-language models (docs/models.md)"),
    Oddity(name="encoder/decoder lengths on a decoder-only model",
           fields=("training.source_len", "training.target_len"),
           applies=lambda job, given, model: not getattr(model, "is_encoder_decoder", False)
           and (given("training.source_len") or given("training.target_len")),
           message="ignored: the model is decoder-only; training.seq_len sizes it",
           reason="source_len/target_len are an encoder-decoder model's two sequences "
                  "(docs/models.md)"),
    Oddity(name="inference settings in a training job", fields=tuple(
               f"inference.{name}" for name in ("batch", "context", "output_tokens", "kv_dtype",
                                                "kv_block_size", "quantization", "group_size",
                                                "runtime", "gpu_memory_utilization",
                                                "max_num_batched_tokens", "max_num_seqs",
                                                "cuda_graphs")),
           applies=lambda job, given, model: job.mode == "training"
           and _inference_given(job, given),
           message="ignored: mode is training (set mode inference to estimate serving)",
           reason="the inference section describes serving (docs/inference.md)"),
    Oddity(name="group size without GPTQ/AWQ", fields=("inference.group_size",),
           applies=lambda job, given, model: job.mode == "inference"
           and given("inference.group_size")
           and job.inference.quantization not in ("gptq", "awq", "int4"),
           message="ignored: inference.quantization is not a grouped format (gptq, awq, int4)",
           reason="a group size is the number of weights sharing one GPTQ/AWQ scale"),
    Oddity(name="flat price with a provider",
           fields=("pricing.provider", "pricing.price_per_gpu_hour"),
           applies=lambda job, given, model: job.pricing.price_per_gpu_hour is not None
           and job.pricing.provider not in (None, "cheapest"),
           message="ignored: pricing.price_per_gpu_hour overrides the price table",
           reason="the flat price is used as given; the provider's rate is not looked up"),
    Oddity(name="main grads dtype without master precision",
           fields=("training.main_grads_dtype", "training.precision"),
           applies=lambda job, given, model: job.training.main_grads_dtype is not None
           and job.training.precision in ("pure", "amp"),
           message="ignored: it applies under precision master only",
           reason="pure keeps gradients in training.dtype and amp in fp32 (docs/memory_model.md "
                  "'Precision rule')"),
    Oddity(name="MoE capacity on a dense model",
           fields=("training.moe_expert_capacity_factor", "training.moe_pad_to_capacity"),
           applies=lambda job, given, model: not getattr(model, "is_moe", False)
           and (given("training.moe_expert_capacity_factor")
                or given("training.moe_pad_to_capacity")),
           message="ignored: the model has no routed experts",
           reason="Megatron-Core's capacity factor and drop-and-pad apply to MoE layers only "
                  "(Megatron-Bridge moe_token_drop.py skips dense models)"),
    Oddity(name="CUDA graph scope outside Megatron-Core", fields=("training.cuda_graph_scope",),
           applies=lambda job, given, stack_name: given("training.cuda_graph_scope")
           and stack_name != "megatron-core", by_stack=True,
           message="ignored: only the megatron-core stack prices Megatron-Core's CUDA graphs",
           reason="--cuda-graph-scope names Megatron-Core capture regions "
                  "(megatron/core/transformer/enums.py CudaGraphModule)"),
    Oddity(name="learned model without a learned method", fields=("options.learned_model",),
           applies=lambda job, given, model: job.options.learned_model is not None
           and job.options.method == "theory",
           message="ignored: options.method is theory (use learned or hybrid)",
           reason="only the learned and hybrid policies read a learned-model bundle "
                  "(docs/learned.md)"),
)


#: the built-in stacks whose eager attention runs Megatron's FusedScaleMaskSoftmax (stacks.toml
#: ``fused_softmax_max_seq``; tests/test_megatron_softmax.py keeps the two in step: bounds does
#: not import fmest.stacks, which imports the job model)
FUSED_SOFTMAX_STACKS = ("megatron-deepspeed",)


def _fused_softmax_stack(stack_name: str) -> bool:
    """Whether the resolved stack ``stack_name`` runs Megatron's FusedScaleMaskSoftmax."""
    return (stack_name or "").lower() in FUSED_SOFTMAX_STACKS


def check_oddities(job, model, stack_name: str = "") -> tuple[str, ...]:
    """The warnings of :data:`ODDITIES` the job breaks, each naming the field the user set;
    ``stack_name``: the job's resolved training stack (``""``: none), for the rules that read
    it (``Oddity.by_stack``)."""
    is_given = _given_fn(job)
    out = []
    for rule in ODDITIES:
        if rule.applies(job, is_given, stack_name if rule.by_stack else model):
            named = next((p for p in rule.fields if is_given(p)), rule.fields[0])
            out.append(f"{named}: {rule.message} ({rule.reason})")
    return tuple(out)


# -- flags that set one field two ways ---------------------------------------------------------


@frozen(kw_only=True)
class FlagConflict:
    """Two flags that contradict each other; ``applies(args)`` on the argparse namespace."""

    flags: tuple[str, str]
    applies: Callable[[Any], bool]
    reason: str


FLAG_CONFLICTS: tuple[FlagConflict, ...] = (
    FlagConflict(flags=("--lora", "--qlora"),
                 applies=lambda a: bool(getattr(a, "lora", None)) and bool(getattr(a, "qlora", None)),
                 reason="a run trains one kind of adapter; --qlora is LoRA on a quantized base"),
    FlagConflict(flags=("--lora", "--technique"),
                 applies=lambda a: bool(getattr(a, "lora", None))
                 and getattr(a, "technique", None) not in (None, "lora"),
                 reason="--lora means --technique lora"),
    FlagConflict(flags=("--qlora", "--technique"),
                 applies=lambda a: bool(getattr(a, "qlora", None))
                 and getattr(a, "technique", None) not in (None, "qlora"),
                 reason="--qlora means --technique qlora"),
    FlagConflict(flags=("--flashattn", "--attn"),
                 applies=lambda a: bool(getattr(a, "flashattn", None))
                 and getattr(a, "attn", None) not in (None, "flash"),
                 reason="--flashattn means --attn flash"),
    FlagConflict(flags=("--fused-loss", "--loss"),
                 applies=lambda a: getattr(a, "fused_loss", None) is not None
                 and getattr(a, "loss", None) is not None
                 and (a.loss == "fused") != bool(a.fused_loss),
                 reason="--fused-loss true means --loss fused (false: --loss standard)"),
    FlagConflict(flags=("--dtype", "--technique"),
                 applies=lambda a: getattr(a, "dtype", None) in ("int8", "nf4")
                 and getattr(a, "mode", None) != "inference"
                 and getattr(a, "technique", None) not in (None, "qlora"),
                 reason="--dtype int8/nf4 means a quantized base, --technique qlora"),
)


def check_flags(args) -> None:
    """Refuse flags that set one field two ways (:data:`FLAG_CONFLICTS`)."""
    for rule in FLAG_CONFLICTS:
        if rule.applies(args):
            first, second = rule.flags
            raise InputError(second, f"contradicts {first}: {rule.reason}",
                             value=getattr(args, second.lstrip("-").replace("-", "_"), None))


# -- the hardware can do it ---------------------------------------------------------------------

#: (job field, value, GpuSpec capability attribute, what is missing, what to use instead)
HARDWARE_RULES: tuple[tuple[str, str, str, str, str], ...] = (
    ("training.dtype", "fp8", "fp8_units", "FP8 matrix units",
     "bf16 or fp16 (FP8 needs Ada, Hopper, Blackwell, MI300 or Gaudi 2/3)"),
    ("training.dtype", "bf16", "bf16_units", "BF16 matrix units", "fp16 or fp32"),
    ("training.attention", "flash", "flash_attention_2",
     "FlashAttention-2 support (Ampere or newer, MI200/MI300)",
     "sdpa (its memory-efficient kernel keeps no s x s scores either)"),
)


def _is_default(job, path: str) -> bool:
    section, name = _parts(path)
    return _get(job, path) == attrs.fields_dict(type(getattr(job, section)))[name].default


def check_hardware(job, gpu) -> tuple[str, ...]:
    """Refuse what the GPU cannot run, by the capability columns of the GPU table (a ``None``
    capability, not verified, is let through). A field left at its default (bf16 on a T4 the
    user named without a dtype) is answered with a warning naming the field instead."""
    warnings = []
    for path, value, capability, missing, instead in HARDWARE_RULES:
        if _get(job, path) == value and getattr(gpu, capability, None) is False:
            source = getattr(gpu, "capability_source", "") or "the GPU table"
            why = (f"{gpu.name} has no {missing}; use {instead} (source: "
                   f"{source.split(' | ')[0]})")
            if not _is_default(job, path):
                raise InputError(path, why, value=value)
            warnings.append(f"{path}: the default {value} cannot run as such: {why}; the "
                            "estimate takes the GPU table's fallback figures")
    return tuple(warnings)


# -- the model ----------------------------------------------------------------------------------

#: ModelSpec field -> (minimum, maximum, reason of the maximum)
MODEL_RANGES: dict[str, tuple[int, int, str]] = {
    "hidden_size": (1, 2**20, "40x the widest published model (Megatron 1T, 25,600)"),
    "num_layers": (1, 2**16, "500x the deepest published LLM (~128 layers)"),
    "num_attention_heads": (1, 2**16, "attention heads"),
    "num_kv_heads": (1, 2**16, "key/value heads"),
    "head_dim": (1, 2**16, "per-head width"),
    "intermediate_size": (0, 2**24, "MLP width"),
    "vocab_size": (1, 2**24, "64x the largest published vocabulary (~262k, Gemma 3)"),
    "max_position_embeddings": (1, 2**30, "positions"),
    "num_experts": (0, 2**16, "experts"),
    "experts_per_token": (0, 2**16, "routed experts per token"),
    "moe_intermediate_size": (0, 2**24, "expert MLP width"),
}


#: id -> a model that passed :func:`check_model` (kept, so its id is not reused): a model
#: spec is frozen, so one that passed once passes again; each estimate checks its model twice
#: (:meth:`fmest.engine.Engine._context`, :func:`check_context`) and a report's searches
#: estimate the same model a dozen times
_CHECKED_MODELS: dict[int, Any] = {}


def check_model(model) -> None:
    """Refuse a model whose dimensions are out of range (zero or negative widths give zero
    divisions and negative parameter counts)."""
    if _CHECKED_MODELS.get(id(model)) is model:
        return
    _check_model(model)
    if len(_CHECKED_MODELS) > 256:
        _CHECKED_MODELS.clear()
    _CHECKED_MODELS[id(model)] = model


def _check_model(model) -> None:
    """:func:`check_model` of a model not checked before."""
    for name, (low, high, reason) in MODEL_RANGES.items():
        value = getattr(model, name, None)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InputError(f"model.{name}", f"the model config's {name} must be a whole "
                             f"number from {low} to {high} ({reason})", value=value)
    if model.num_attention_heads % model.num_kv_heads:
        raise InputError("model.num_kv_heads", "must divide the model's "
                         f"{model.num_attention_heads} attention heads (grouped-query "
                         "attention shares each key/value head by a whole group)",
                         value=model.num_kv_heads)
    if model.experts_per_token > model.num_experts:
        raise InputError("model.experts_per_token", f"more routed experts per token than the "
                         f"model's {model.num_experts} experts", value=model.experts_per_token)


#: Hugging Face config keys that are model dimensions (every naming the builders read): each
#: must be a whole number >= 1 when given (0 divides by zero, negatives give negative counts)
HF_DIMENSION_KEYS = (
    "hidden_size", "n_embd", "d_model", "num_hidden_layers", "n_layer", "num_layers",
    "num_attention_heads", "n_head", "num_heads", "num_key_value_heads", "multi_query_group_num",
    "head_dim", "intermediate_size", "n_inner", "ffn_dim", "d_ff", "vocab_size",
    "max_position_embeddings", "n_positions", "seq_length", "max_seq_len", "num_local_experts",
    "n_routed_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
    "decoder_layers", "encoder_layers", "decoder_attention_heads", "encoder_attention_heads",
    "encoder_ffn_dim", "decoder_ffn_dim", "num_decoder_layers", "d_kv")
_ZERO_OK = frozenset({"num_local_experts", "n_routed_experts", "num_experts",
                      "num_experts_per_tok", "moe_intermediate_size", "n_inner"})


def _non_finite(value: Any, path: str) -> Optional[str]:
    if isinstance(value, float) and not math.isfinite(value):
        return path
    if isinstance(value, dict):
        items: Iterable = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        hit = _non_finite(item, f"{path}[{key!r}]" if isinstance(value, list) else
                          f"{path}.{key}")
        if hit:
            return hit
    return None


def check_hf_config(config: dict, field: str = "model_config") -> None:
    """Refuse a Hugging Face config whose dimensions are not whole numbers >= 1 (0 for expert
    counts) or that holds a non-finite number anywhere, before a builder divides by them.
    Nested text configs (``text_config``) are checked the same way."""
    if not isinstance(config, dict):
        raise InputError(field, "expected a Hugging Face config object", value=config)
    bad = _non_finite(config, field)
    if bad:
        raise InputError(bad, "not a finite number")
    for key in HF_DIMENSION_KEYS:
        value = config.get(key)
        if value is None:
            continue
        low = 0 if key in _ZERO_OK else 1
        whole = isinstance(value, int) and not isinstance(value, bool) or (
            isinstance(value, float) and value.is_integer())
        if not whole or not low <= value <= 2**40:
            raise InputError(f"{field}.{key}", f"a model dimension must be a whole number from "
                             f"{low} to 2^40", value=value)
    for nested in ("text_config", "decoder", "encoder", "language_config", "llm_config"):
        if isinstance(config.get(nested), dict):
            check_hf_config(config[nested], f"{field}.{nested}")


def _learned_positions(model) -> bool:
    return any(getattr(g, "kind", "") == "position" for g in getattr(model, "groups", ()))


def _position_table(job, model) -> tuple[str, ...]:
    """A sequence past a learned position table: refused when the user chose the length; the
    default length (``Training.seq_len``'s 2048, which the user did not choose) is answered
    with a warning naming the field."""
    seq_len, table = job.training.seq_len, model.max_position_embeddings
    if not _learned_positions(model) or seq_len <= table:
        return ()
    why = (f"{model.name} has a learned position table of {table} positions; longer sequences "
           "have no position embedding (rotary/ALiBi models extrapolate, learned tables cannot)")
    default = attrs.fields_dict(type(job.training))["seq_len"].default
    if seq_len == default:
        return (f"training.seq_len: the default {default} is beyond what the model can run: "
                f"{why}; give --seq-len {table} or less",)
    raise InputError("training.seq_len", why, value=seq_len, accepted=[f"1 .. {table}"])


def check_model_job(job, model, layout) -> tuple[str, ...]:
    """Rules between the job and its model/layout: the learned position table's length,
    pipeline chunks dividing the layers, HSDP groups dividing the GPUs, LoRA rank. Returns the
    warnings of rules answered rather than refused."""
    par = job.parallelism
    warnings = _position_table(job, model)
    chunks = par.pp * par.pp_virtual_stages
    if par.pp_virtual_stages > 1 and chunks > model.num_layers + 2:
        # uneven chunks are real (Megatron-LM --decoder-first/last-pipeline-num-layers; Llama 3
        # 405B trains 126 layers over 16 stages, arXiv:2407.21783 sec. 3.3.2) and the embedding
        # and the loss may each take a chunk of their own (--account-for-embedding/loss-in-
        # pipeline-split: 126 layers in 16 x 8 chunks); a chunk with nothing in it is not
        raise InputError("parallelism.pp_virtual_stages", f"pp x pp_virtual_stages = {chunks} "
                         f"model chunks for the model's {model.num_layers} layers plus the "
                         "embedding and the loss: a chunk needs at least one of them",
                         value=par.pp_virtual_stages)
    shard = par.hsdp_shard_size
    if shard is not None and (shard > layout.dp or layout.dp % shard):
        raise InputError("parallelism.hsdp_shard_size", f"must divide the {layout.dp} "
                         "data-parallel GPUs (HYBRID_SHARD replicates whole shard groups)",
                         value=shard, accepted=[d for d in range(1, layout.dp + 1)
                                                if layout.dp % d == 0][:25])
    if job.training.technique != "full" and job.training.lora_rank > model.hidden_size:
        raise InputError("training.lora_rank", f"above the model's hidden size "
                         f"{model.hidden_size} (a rank-r adapter of a d-wide layer has r <= d)",
                         value=job.training.lora_rank)
    return warnings


def check_context(job, *, model, gpu, layout, stack_name: str = "") -> tuple[str, ...]:
    """Every check that needs the resolved model, GPU and layout (and the resolved stack's
    name, for the oddities that read it); returns the warnings of the rules answered with a
    warning instead of a refusal."""
    check_model(model)
    warnings = check_hardware(job, gpu)
    if layout.world_size > 2**20:
        raise InputError("hardware", f"{layout.world_size} GPUs is above the bound 2^20 "
                         f"({_GPUS})", value=layout.world_size)
    return warnings + check_model_job(job, model, layout) + check_oddities(job, model,
                                                                          stack_name)


# -- plugin answers -----------------------------------------------------------------------------

#: answer type name -> the fields that must be finite and >= 0 when set
_ANSWER_NUMBERS = {
    "MemoryEstimate": ("total_bytes",),
    "TimeEstimate": ("step_seconds", "mfu", "hfu", "flops_per_step", "total_seconds",
                     "total_steps"),
    "TokensEstimate": ("tokens_per_second", "tokens_per_second_per_gpu", "samples_per_second",
                       "mfu", "hfu"),
    "CostEstimate": ("usd", "usd_per_hour", "gpu_hours"),
}
_MAPPINGS = {"MemoryEstimate": ("components", "phase_peaks_bytes"),
             "TimeEstimate": ("breakdown",)}


def _bad_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    return not math.isfinite(value) or value < 0


def answer_problem(result) -> Optional[str]:
    """Why a plugin's answer breaks the answer contract (``None``: it does not): every number
    finite and non-negative, and a memory answer's components summing to its total (to a
    byte per component)."""
    kind = type(result).__name__
    for name in _ANSWER_NUMBERS.get(kind, ()):
        value = getattr(result, name, None)
        if value is not None and _bad_number(value):
            return f"{name} = {value!r} is not a finite number >= 0"
    for name in _MAPPINGS.get(kind, ()):
        mapping = getattr(result, name, None) or {}
        if not isinstance(mapping, dict):
            return f"{name} is a {type(mapping).__name__}, not a mapping"
        for key, value in mapping.items():
            kind_of = type(value)   # the common case inline: plain ints and finite floats
            if (kind_of is int and value >= 0) or (kind_of is float and 0 <= value < math.inf):
                continue
            if _bad_number(value):
                return f"{name}[{key!r}] = {value!r} is not a finite number >= 0"
    interval = getattr(getattr(result, "provenance", None), "interval", None)
    if interval is not None and any(_bad_number(v) for v in interval):
        return f"provenance.interval = {interval!r} is not two finite numbers >= 0"
    if kind == "MemoryEstimate" and result.components:
        total = sum(result.components.values())
        if abs(total - result.total_bytes) > max(1, len(result.components)):
            return (f"components sum to {total} bytes, not total_bytes = "
                    f"{result.total_bytes}")
    return None


def registered_problem(item) -> Optional[str]:
    """Why a registered GPU or price holds a number no formula can use (None: it does not):
    a GPU's memory must be a positive whole number of bytes and its rates finite and positive
    (or absent); a price finite and >= 0 for at least one GPU per instance."""
    kind = type(item).__name__
    if kind == "GpuSpec":
        memory = item.memory_bytes
        if isinstance(memory, bool) or not isinstance(memory, int) or memory <= 0:
            return f"memory_bytes = {memory!r} is not a positive whole number of bytes"
        for name in ("hbm_bytes_per_s", "fp32_flops_per_s", "tf32_flops_per_s",
                     "fp16_flops_per_s", "bf16_flops_per_s", "fp8_flops_per_s",
                     "int8_ops_per_s", "intra_node_bytes_per_s", "inter_node_bytes_per_s",
                     "pcie_bytes_per_s", "tdp_watts"):
            value = getattr(item, name, None)
            if value is not None and (_bad_number(value) or value == 0):
                return f"{name} = {value!r} is not a finite number > 0"
    elif kind == "PriceQuote":
        if _bad_number(item.usd_per_instance_hour):
            return f"usd_per_instance_hour = {item.usd_per_instance_hour!r} is not a finite " \
                   "number >= 0"
        count = item.gpus_per_instance
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            return f"gpus_per_instance = {count!r} is not a whole number >= 1"
    return None


# -- documentation -------------------------------------------------------------------------------


def markdown() -> str:
    """The bounds and conflict rules as the ``docs/cli.md`` section (generated, so the page
    cannot drift from the checks)."""
    lines = ["## Bounds and conflict rules", "",
             "Generated from `fmest.bounds` (`scripts/gen_cli_docs.py`). Every door (flags, "
             "`-f`, `--config`, the Python API, the service) applies them; a refusal is one "
             "line naming the field, exit code 2 (`InputError` in Python). Numbers must be "
             "finite everywhere (`nan`, `inf` are refused). A field left at its default value "
             "contradicts nothing; a hardware or position-table rule broken only by a default "
             "the user did not choose (bf16 on a T4 named without a dtype, GPT-2 at the default "
             "2048 tokens) is answered with a warning naming the field instead.", "",
             "**Bounds** (largest accepted value)", "", "| field | at most | why |",
             "|---|---|---|"]
    lines += [f"| `{b.path}` | {_shown(b.maximum)} | {b.reason} |" for b in BOUNDS]
    lines += ["", "**Conflicts** (refused together)", "", "| fields | refused when | why |",
              "|---|---|---|"]
    lines += [f"| {', '.join(f'`{p}`' for p in c.fields)} | {c.message} | {c.reason} |"
              for c in CONFLICTS]
    lines += ["", "**Warnings** (answered, with a warning naming the field: a setting the "
              "run ignores or another setting overrides)", "", "| fields | warned when | why |",
              "|---|---|---|"]
    lines += [f"| {', '.join(f'`{p}`' for p in o.fields)} | {o.message} | {o.reason} |"
              for o in ODDITIES]
    lines += ["", "**Flags** (one field set two ways)", "", "| flags | why |", "|---|---|"]
    lines += [f"| `{f.flags[0]}` with `{f.flags[1]}` | {f.reason} |" for f in FLAG_CONFLICTS]
    lines += ["", "**Hardware** (GPU table capability columns, sources in "
              "`core/fmest/data/README.md`)", "", "| field = value | needs | instead |",
              "|---|---|---|"]
    lines += [f"| `{p}` = `{v}` | `{cap}` (the GPU's {missing}) | {instead} |"
              for p, v, cap, missing, instead in HARDWARE_RULES]
    lines += ["", "**Model** (the resolved config)", "", "| field | accepted | why |",
              "|---|---|---|"]
    lines += [f"| `model.{n}` | {lo} .. {hi} | {why} |" for n, (lo, hi, why) in
              MODEL_RANGES.items()]
    lines += [f"| `model` | path components of at most {NAME_MAX} bytes, no NUL | longer "
              "names are neither a local path (Linux NAME_MAX) nor a Hub id |"]
    lines += ["| `training.seq_len` | at most the learned position table | GPT-2- and OPT-"
              "style learned tables have no row past their length (the untouched default "
              "2048 is answered with a warning) |",
              "| `parallelism.pp_virtual_stages` | pp x chunks at most the layers + 2 | a "
              "chunk holds at least a layer, the embedding or the loss (Megatron-LM "
              "--account-for-embedding/loss-in-pipeline-split); uneven chunks are allowed "
              "(--decoder-first/last-pipeline-num-layers; Llama 3 405B: 126 layers over 16 "
              "stages, arXiv:2407.21783) |",
              "| `parallelism.hsdp_shard_size` | divides the data-parallel GPUs | HYBRID_SHARD "
              "replicates whole shard groups |",
              "| `training.lora_rank` | at most the hidden size | a rank-r adapter of a d-wide "
              "layer has r <= d |", ""]
    return "\n".join(lines)
