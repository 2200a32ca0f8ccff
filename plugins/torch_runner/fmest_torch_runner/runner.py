"""The step runner: build the real transformers model of a job and run two training steps.

One runner, three modes:

* ``fake`` -- under ``FakeTensorMode`` on CPU (no memory, no compute); the live-storage tracker
  (:mod:`fmest_torch_runner.tracker`) gives per-phase peaks and a breakdown. Llama-2-7B in
  seconds with ~0.4 GiB RSS.
* ``cpu`` -- real steps on CPU under ``torch.profiler`` with ``profile_memory=True``; truth =
  bytes of tensors alive at the start + max of the allocator's ``total_allocated`` per phase
  (the CPU analogue of ``torch.cuda.max_memory_allocated``). The tracker runs alongside for
  the breakdown.
* ``cuda`` -- real steps on a GPU: ``max_memory_allocated``/``max_memory_reserved`` per phase,
  step time. Written and unit-tested without a GPU; NOT yet run on hardware.

Two optimizer steps are run because the steady state (step 2) holds optimizer state during
forward and backward; step 1 does not (Llama-2-7B s4096 b2: 86.4 vs 62.8 GiB). With gradient
accumulation up to two micro-batches per step are run (the second one holds gradients).
Phases are named ``s{step}_{forward|backward|optimizer}``.
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from typing import Any, Optional

from attrs import define, field, frozen

from fmest.counting import LORA_TECHNIQUES, default_lora_targets

MODES = ("fake", "cpu", "cuda")
CATEGORIES = ("params", "grads", "optimizer_state", "activations", "temporaries")
RUNNER_VERSION = "2"  # 2: fsdp_world_size (FSDP2 on a fake process group)
#: the optimizers the runner can instantiate: canonical fmest name -> (torch class, kwargs)
SUPPORTED_OPTIMIZERS = ("adamw", "adamw_torch_fused", "sgd", "sgd_momentum")
#: sharding strategies are traced with FSDP2 ``fully_shard`` when they behave like it
#: (``ShardingStrategy.gathers_full_shard``: FSDP FULL_SHARD, ZeRO-3 as an approximation)


class Unsupported(Exception):
    """The job uses something this runner cannot execute on the requested device."""


@frozen(kw_only=True)
class RunSpec:
    """Everything the runner needs, derived from a job (see :func:`run_spec_from_job`)."""

    hf_config: dict
    model_name: str = "model"
    param_dtype: str = "fp32"  # dtype weights are built in
    autocast_dtype: Optional[str] = None  # torch.autocast dtype, None = off
    precision: str = "pure"  # resolved: pure / amp / master
    technique: str = "full"
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj")
    quantization_bits: int = 4
    double_quantization: bool = True
    gradient_checkpointing: bool = False
    attention: str = "sdpa"
    optimizer: str = "adamw"
    optimizer_impl: str = "foreach"
    seq_len: int = 128
    micro_batch_size: int = 1
    micro_batches: int = 1  # micro-batches run per step: min(grad_accum_steps, 2)
    steps: int = 2
    num_layers: Optional[int] = None  # override the config's layer count (calibration)
    #: > 1: trace FSDP2 ``fully_shard`` on a fake process group of this many ranks (fake mode
    #: only; per-rank memory of rank 0). 1 = single process, sharding left to the caller.
    fsdp_world_size: int = 1
    #: encoder-decoders: encoder (source) and decoder (target) tokens; None = seq_len
    source_len: Optional[int] = None
    target_len: Optional[int] = None
    #: LLaVA-style VLMs: images per sample, and whether the vision tower trains
    images_per_sample: int = 1
    train_vision_tower: bool = False

    def key(self) -> dict:
        """A JSON-able dict identifying the run (for cache hashes)."""
        import attrs

        d = attrs.asdict(self)
        d["lora_targets"] = list(self.lora_targets)
        return d


@define
class RunResult:
    """What one run measured. Bytes are per device; ``peak_bytes`` is the figure of record
    (fake: tracker; cpu: allocator truth; cuda: ``max_memory_allocated``)."""

    mode: str
    status: str = "ok"  # ok / oom / error / unsupported
    error: str = ""
    peak_bytes: Optional[int] = None
    tracker_peak_bytes: Optional[int] = None
    reserved_peak_bytes: Optional[int] = None
    peak_window: str = ""
    phase_peaks_bytes: dict = field(factory=dict)
    breakdown_bytes: dict = field(factory=dict)
    phase_breakdowns: dict = field(factory=dict)
    window_end_bytes: dict = field(factory=dict)  # category bytes alive at each window's end
    step_seconds: list = field(factory=list)
    start_bytes: Optional[int] = None
    params: Optional[int] = None
    trainable_params: Optional[int] = None
    wall_seconds: Optional[float] = None
    notes: list = field(factory=list)

    def to_dict(self) -> dict:
        import attrs

        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RunResult":
        return cls(**d)


# -- job -> RunSpec ------------------------------------------------------------------------

def resolve_precision(training, sharding=None) -> str:
    """Core's rule (:func:`fmest.precision.resolve_precision`, shared with the memory and time
    plugins; the engine resolves it into ``ctx.transforms.precision``) for ``precision="auto"``;
    without a sharding strategy, one that shards nothing (a single GPU or DDP).

    What the runner builds: ``pure`` = everything in ``dtype`` (LoRA adapters too); ``amp`` =
    full: fp32 weights + ``torch.autocast(dtype)``, LoRA: base in ``dtype``, adapters fp32
    (peft ``autocast_adapter_dtype``) + autocast; ``master`` = ``dtype`` weights and grads +
    an fp32 master copy the optimizer updates."""
    from fmest.precision import resolve_precision as rule
    from fmest.transforms import ShardingStrategy

    return rule(training, sharding if sharding is not None else ShardingStrategy(name="none"))


def _check_runnable(job, spec, device: str) -> None:
    """Raise :class:`Unsupported` naming what the runner cannot execute for ``job``."""
    tr = job.training
    if not spec.hf_config:
        raise Unsupported(f"model {spec.name!r} has no hf_config to build it from")
    if tr.dtype == "fp8":
        raise Unsupported("fp8 training (torchao float8) is not run by the torch runner")
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


def _optimizer_choice(training, optimizer_name: Optional[str]) -> tuple[str, str]:
    """(torch optimizer, implementation) the runner instantiates for the job's optimizer."""
    opt = (optimizer_name or training.optimizer).lower()
    if opt == "adam":
        opt = "adamw"
    if opt not in SUPPORTED_OPTIMIZERS:
        raise Unsupported(f"optimizer {opt!r} (supported: {', '.join(SUPPORTED_OPTIMIZERS)})")
    impl = training.optimizer_impl
    if opt == "adamw_torch_fused":
        opt, impl = "adamw", "fused"
    if impl == "auto":  # the CUDA default: foreach for AdamW and SGD
        impl = "foreach"
    return opt, impl


def _weight_dtypes(training, precision: str) -> tuple[str, Optional[str]]:
    """(dtype the weights are built in, autocast dtype or None) under ``precision``."""
    half = None if training.dtype == "fp32" else training.dtype
    if precision == "pure":
        return training.dtype, None
    if precision == "amp" and training.technique != "full":
        return training.dtype, half  # frozen base stays in dtype
    if precision == "amp":
        return "fp32", half
    return training.dtype, None  # master: dtype weights/grads + fp32 master copy and states


def run_spec_from_job(job, spec, *, optimizer_name: Optional[str] = None,
                      device: str = "fake", sharding=None, fsdp_world_size: int = 1,
                      precision: Optional[str] = None) -> RunSpec:
    """The :class:`RunSpec` of ``job`` on ``spec`` (a :class:`fmest.models.ModelSpec` with
    ``hf_config``). Raises :class:`Unsupported` naming what the runner cannot execute.

    ``precision``: the resolved policy (``ctx.transforms.precision``); without it the core rule
    runs with ``sharding``. ``fsdp_world_size > 1`` asks for a traced FSDP2 full-shard run (see
    :func:`fsdp_traceable`); it raises :class:`Unsupported` when the job cannot be traced so."""
    tr = job.training
    _check_runnable(job, spec, device)
    opt, impl = _optimizer_choice(tr, optimizer_name)
    precision = precision or resolve_precision(tr, sharding)
    param_dtype, autocast = _weight_dtypes(tr, precision)
    attention = tr.attention
    if spec.eager_only and attention == "sdpa":
        attention = "eager"
    return RunSpec(
        hf_config=dict(spec.hf_config), model_name=spec.name, param_dtype=param_dtype,
        autocast_dtype=autocast, precision=precision, technique=tr.technique,
        lora_rank=tr.lora_rank, lora_alpha=tr.lora_alpha,
        # empty = PEFT's default for the model type (a job that skipped Engine.resolve_job)
        lora_targets=tuple(tr.lora_target_modules) or (
            default_lora_targets(spec) if tr.technique in LORA_TECHNIQUES else ()),
        quantization_bits=tr.quantization_bits,
        double_quantization=tr.double_quantization,
        gradient_checkpointing=tr.activation_checkpointing == "full", attention=attention,
        optimizer=opt, optimizer_impl=impl, seq_len=tr.seq_len,
        micro_batch_size=tr.micro_batch_size, micro_batches=min(tr.grad_accum_steps, 2),
        fsdp_world_size=_check_fsdp(fsdp_world_size, device, precision, tr.technique),
        source_len=tr.source_len, target_len=tr.target_len,
        images_per_sample=tr.images_per_sample, train_vision_tower=tr.train_vision_tower)


def fsdp_traceable(job, sharding, world_size: int, *, device: str = "fake") -> Optional[str]:
    """None when ``job`` with ``sharding`` over ``world_size`` ranks can be traced with FSDP2
    on a fake process group, else the reason it cannot."""
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
    if resolve_precision(job.training, sharding) not in ("pure", "amp"):
        return "precision 'master' under FSDP is not traced"
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


# -- building ------------------------------------------------------------------------------

def _dtype(name: Optional[str]):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
            None: None}[name]


def build_config(run: RunSpec):
    """A transformers config from the raw dict (no Hub access)."""
    from transformers import AutoConfig

    d = {k: v for k, v in run.hf_config.items() if not k.startswith("_")}
    model_type = d.pop("model_type", None)
    if not model_type:
        raise Unsupported("hf_config has no model_type")
    for k in ("architectures", "torch_dtype", "dtype", "transformers_version",
              "quantization_config", "auto_map"):
        d.pop(k, None)
    cfg = AutoConfig.for_model(model_type, **d)
    if run.num_layers is not None:
        cfg.num_hidden_layers = run.num_layers
        for key in ("layer_types", "mlp_only_layers"):
            val = getattr(cfg, key, None)
            if isinstance(val, list) and len(val) > run.num_layers:
                setattr(cfg, key, val[:run.num_layers])
    cfg.use_cache = False
    return cfg


def _attn_impl(attention: str, device: str) -> str:
    if attention == "flash":
        if device == "cuda":
            try:
                import flash_attn  # noqa: F401

                return "flash_attention_2"
            except ImportError:
                return "sdpa"
        return "sdpa"  # CPU sdpa runs a flash kernel: no s^2 tensors, like flash-attention
    return attention


def _lora_config(run: RunSpec):
    from peft import LoraConfig

    targets = list(run.lora_targets)
    if set(targets) & {"all-linear", "all_linear", "linear"}:
        targets = "all-linear"
    return LoraConfig(r=run.lora_rank, lora_alpha=run.lora_alpha, lora_dropout=0.0,
                      target_modules=targets, task_type="CAUSAL_LM")


def _peft_kwargs(run: RunSpec) -> dict:
    # peft keeps adapters in fp32 unless told not to; "pure" means adapters in dtype too
    return {"autocast_adapter_dtype": run.precision != "pure"}


def _meta_to_fake(model, fake_mode) -> None:
    """Replace every meta parameter/buffer (and meta tensor attribute) by a fake CPU tensor,
    keeping tied weights tied. ``Module.to()`` cannot be used on fake params (pitfall a)."""
    import torch

    memo: dict[int, Any] = {}

    def fake_like(t):
        with fake_mode:
            return torch.empty(t.shape, dtype=t.dtype, device="cpu")

    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in memo:
                memo[id(p)] = torch.nn.Parameter(fake_like(p), requires_grad=p.requires_grad)
            mod._parameters[name] = memo[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is None:
                continue
            if id(b) not in memo:
                memo[id(b)] = fake_like(b)
            mod._buffers[name] = memo[id(b)]
        for name, v in list(vars(mod).items()):
            if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter) \
                    and v.device.type == "meta":
                if id(v) not in memo:
                    memo[id(v)] = fake_like(v)
                object.__setattr__(mod, name, memo[id(v)])


def _quantize_4bit(model, run: RunSpec):
    """QLoRA base: every linear but the head as a bitsandbytes Linear4bit (nf4) on CUDA.
    UNTESTED ON HARDWARE (no GPU in the session that wrote it)."""
    import bitsandbytes as bnb
    import torch

    compute = _dtype(run.param_dtype)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Linear) and name != "lm_head":
                q = bnb.nn.Linear4bit(child.in_features, child.out_features,
                                      bias=child.bias is not None, compute_dtype=compute,
                                      compress_statistics=run.double_quantization,
                                      quant_type="nf4")
                q.weight = bnb.nn.Params4bit(child.weight.data.cpu(), requires_grad=False,
                                             compress_statistics=run.double_quantization,
                                             quant_type="nf4")
                if child.bias is not None:
                    q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
                setattr(parent, name, q.cuda())
    return model


def _enable_gc(model, gc_kwargs) -> None:
    # transformers 5 renamed gradient_checkpointing_enable (deprecated alias kept)
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=gc_kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gc_kwargs)


#: Vision-language model types the runner feeds images to (pixel_values of the tower's fixed
#: image size, image tokens in input_ids); other VLMs need per-model image inputs.
TRACED_VLM_TYPES = ("llava",)


def _auto_class(cfg):
    """The transformers Auto class that builds ``cfg``: seq2seq for encoder-decoders,
    image-text-to-text for vision-language configs, causal LM otherwise."""
    import transformers

    if getattr(cfg, "is_encoder_decoder", False):
        return transformers.AutoModelForSeq2SeqLM
    if getattr(cfg, "vision_config", None) is not None:
        if cfg.model_type not in TRACED_VLM_TYPES:
            raise Unsupported(f"vision-language model type {cfg.model_type!r} (traced: "
                              f"{', '.join(TRACED_VLM_TYPES)})")
        return transformers.AutoModelForImageTextToText
    return transformers.AutoModelForCausalLM


def _freeze_vision_tower(model, run: RunSpec) -> None:
    """LLaVA-style fine-tuning freezes the vision tower (the projector trains)."""
    if run.train_vision_tower or run.technique != "full":
        return
    for name, param in model.named_parameters():
        if "vision_tower" in name:
            param.requires_grad_(False)


def build_model(run: RunSpec, mode: str, fake_mode=None):
    """The training model (peft-wrapped for LoRA/QLoRA), in train mode, on the device."""
    import torch

    cfg = build_config(run)
    auto_class = _auto_class(cfg)
    kwargs = dict(dtype=_dtype(run.param_dtype), attn_implementation=_attn_impl(run.attention,
                                                                                  mode))
    gc_kwargs = {"use_reentrant": False}
    if mode == "fake":
        # build on meta (milliseconds, no init kernels), wrap with peft there, then swap in
        # fake CPU tensors (pitfall a: fake params cannot be moved or cast)
        with torch.device("meta"):
            model = auto_class.from_config(cfg, **kwargs)
            if run.gradient_checkpointing:
                _enable_gc(model, gc_kwargs)
            if run.technique == "lora":
                from peft import get_peft_model

                model = get_peft_model(model, _lora_config(run), **_peft_kwargs(run))
        _meta_to_fake(model, fake_mode)
    else:
        device = "cuda" if mode == "cuda" else "cpu"
        if run.technique == "qlora":
            if mode != "cuda":
                raise Unsupported("QLoRA needs CUDA (bitsandbytes)")
            model = auto_class.from_config(cfg, **kwargs)
            model = _quantize_4bit(model, run).to(device)
            from peft import get_peft_model, prepare_model_for_kbit_training

            model = prepare_model_for_kbit_training(
                model, use_gradient_checkpointing=run.gradient_checkpointing,
                gradient_checkpointing_kwargs=gc_kwargs)
            model = get_peft_model(model, _lora_config(run), **_peft_kwargs(run))
        else:
            with torch.device(device):
                model = auto_class.from_config(cfg, **kwargs)
            if run.gradient_checkpointing:
                _enable_gc(model, gc_kwargs)
            if run.technique == "lora":
                from peft import get_peft_model

                model = get_peft_model(model, _lora_config(run), **_peft_kwargs(run))
    _freeze_vision_tower(model, run)
    model.train()
    return model


def make_optimizer(params, run: RunSpec):
    import torch

    impl = {"foreach": dict(foreach=True, fused=False), "fused": dict(fused=True),
            "for_loop": dict(foreach=False, fused=False)}[run.optimizer_impl]
    if run.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-5, **impl)
    if run.optimizer in ("sgd", "sgd_momentum"):
        mom = 0.9 if run.optimizer == "sgd_momentum" else 0.0
        return torch.optim.SGD(params, lr=1e-5, momentum=mom, **impl)
    raise Unsupported(f"optimizer {run.optimizer!r}")


@contextlib.contextmanager
def _patched_mask_helper():
    """Pitfall (c): under fake tensors ``find_packed_sequence_indices`` cannot read values and
    keeps a packed-sequence mask (a [b,1,s,s] tensor the real run never builds). The real run
    returns None for an unpacked batch, so return None -- only inside the trace."""
    try:
        import transformers.masking_utils as mu
    except ImportError:  # older transformers: nothing to patch
        yield
        return
    orig = getattr(mu, "find_packed_sequence_indices", None)
    if orig is None:
        yield
        return
    mu.find_packed_sequence_indices = lambda *a, **k: None
    vlm_checks = _disabled_vlm_checks()
    try:
        with vlm_checks:
            yield
    finally:
        mu.find_packed_sequence_indices = orig


@contextlib.contextmanager
def _disabled_vlm_checks():
    """Under fake tensors LLaVA's check that image tokens and image features agree
    (``torch_compilable_check`` on a token count) would read values; the runner builds the
    batch so that they agree, so skip the check -- only inside the trace."""
    try:
        import transformers.models.llava.modeling_llava as llava
    except ImportError:
        yield
        return
    orig = getattr(llava, "torch_compilable_check", None)
    if orig is None:
        yield
        return
    llava.torch_compilable_check = lambda *a, **k: None
    try:
        yield
    finally:
        llava.torch_compilable_check = orig


# -- the steps -----------------------------------------------------------------------------

def _storage_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        st = t.untyped_storage()
        if st._cdata not in seen:
            seen.add(st._cdata)
            total += st.nbytes()
    return total


@frozen(kw_only=True)
class _StepState:
    """What the steps run on: trainable parameters, the batch, the optimizer, the fp32 master
    copies (``master`` precision) and the autocast context."""

    params: list
    inputs: dict
    optimizer: Any
    masters: Optional[list]
    amp: Any


def _prepare_steps(model, run: RunSpec, mode: str, tracker) -> _StepState:
    """Register the start-of-run tensors (weights, buffers, the batch) before anything else
    runs (a ``.detach()`` of a weight would otherwise claim its storage as a temporary), then
    build the optimizer (over fp32 master copies under ``master`` precision)."""
    import torch

    device = "cuda" if mode == "cuda" else "cpu"
    params = [param for param in model.parameters() if param.requires_grad]
    inputs = _batch(model, run, device)
    tracker.register(list(model.parameters()), "params")
    tracker.register(list(model.buffers()), "params")
    tracker.register(list(inputs.values()), "activations")
    tracker.start_bytes = tracker.total
    masters = None
    if run.precision == "master":
        masters = [param.detach().float().requires_grad_(False) for param in params]
        tracker.relabel(masters, "optimizer_state")
    opt = make_optimizer(masters if masters is not None else params, run)
    # under FSDP2 the MixedPrecisionPolicy casts the gathered weights (no autocast)
    amp = (torch.autocast(device, dtype=_dtype(run.autocast_dtype))
           if run.autocast_dtype and run.fsdp_world_size <= 1 else contextlib.nullcontext())
    return _StepState(params=params, inputs=inputs, optimizer=opt, masters=masters, amp=amp)


def _batch(model, run: RunSpec, device: str) -> dict:
    """One micro-batch of model inputs: token ids (labels = ids) for causal LMs; encoder ids of
    ``source_len`` and labels of ``target_len`` for encoder-decoders; for LLaVA, pixel_values at
    the tower's image size and that many image tokens in front of the text."""
    import torch

    cfg = model.config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    vocab = getattr(text, "vocab_size", None) or run.hf_config["vocab_size"]
    batch = run.micro_batch_size
    if getattr(cfg, "is_encoder_decoder", False):
        src = torch.randint(0, vocab, (batch, run.source_len or run.seq_len), device=device)
        tgt = torch.randint(0, vocab, (batch, run.target_len or run.seq_len), device=device)
        # decoder inputs given (not shifted from labels): no decoder_start_token_id needed
        return {"input_ids": src, "decoder_input_ids": tgt, "labels": tgt}
    vision = getattr(cfg, "vision_config", None)
    if vision is None:
        ids = torch.randint(0, vocab, (batch, run.seq_len), device=device)
        return {"input_ids": ids, "labels": ids}
    image_token = getattr(cfg, "image_token_id", None) or getattr(cfg, "image_token_index")
    side = vision.image_size
    per_image = (side // vision.patch_size) ** 2  # CLS dropped ("default" feature select)
    image_ids = run.images_per_sample * per_image
    ids = torch.randint(0, min(vocab, image_token), (batch, run.seq_len + image_ids),
                        device=device)
    ids[:, :image_ids] = image_token
    pixels = torch.randn(batch * run.images_per_sample, vision.num_channels, side, side,
                         device=device, dtype=_dtype(run.param_dtype))
    return {"input_ids": ids, "labels": ids, "pixel_values": pixels}


def _micro_batch(model, run: RunSpec, state: _StepState, tracker, phase, end, step: int):
    """Forward and backward of one micro-batch, each its own phase window."""
    phase(f"s{step}_forward", "forward")
    with state.amp:
        loss = model(**state.inputs, use_cache=False).loss
    if run.micro_batches > 1:
        loss = loss / run.micro_batches
    end()
    phase(f"s{step}_backward", "backward")
    loss.backward()
    del loss
    tracker.relabel([param.grad for param in state.params if param.grad is not None], "grads")
    end()


def _optimizer_step(state: _StepState, tracker) -> None:
    """The update (on the fp32 masters under ``master`` precision, copied back), then
    ``zero_grad(set_to_none=True)``."""
    import torch

    masters, opt = state.masters, state.optimizer
    if masters is not None:
        for param, master in zip(state.params, masters):
            master.grad = param.grad.float() if param.grad is not None else None
            param.grad = None
    opt.step()
    tracker.relabel([value for st in opt.state.values() for value in st.values()
                     if isinstance(value, torch.Tensor)], "optimizer_state")
    if masters is not None:
        with torch.no_grad():
            for param, master in zip(state.params, masters):
                param.copy_(master)
                master.grad = None
    opt.zero_grad(set_to_none=True)


def _train_steps(model, run: RunSpec, mode: str, tracker, *, on_phase=None, sync=None):
    """Run ``run.steps`` optimizer steps; ``on_phase(window, kind)`` / ``on_phase(None, None)``
    bracket each phase. Returns the wall seconds of each step."""
    state = _prepare_steps(model, run, mode, tracker)

    def phase(window, kind):
        if on_phase:
            on_phase(window, kind)
        tracker.phase(window, kind)

    def end():
        tracker.end_phase()
        if on_phase:
            on_phase(None, None)

    times = []
    for step in range(1, run.steps + 1):
        if sync:
            sync()
        started = time.perf_counter()
        for _ in range(run.micro_batches):
            _micro_batch(model, run, state, tracker, phase, end, step)
        phase(f"s{step}_optimizer", "optimizer")
        _optimizer_step(state, tracker)
        end()
        if sync:
            sync()
        times.append(time.perf_counter() - started)
    return times


def _fill_from_tracker(res: RunResult, tracker) -> None:
    res.tracker_peak_bytes = tracker.overall.total
    res.phase_peaks_bytes = {w: p.total for w, p in tracker.windows.items()}
    res.phase_breakdowns = {w: {c: p.by_category.get(c, 0) for c in CATEGORIES}
                            for w, p in tracker.windows.items()}
    res.peak_window = tracker.overall_window
    res.window_end_bytes = {w: {c: v.get(c, 0) for c in CATEGORIES}
                            for w, v in tracker.window_end.items()}
    res.breakdown_bytes = {c: tracker.overall.by_category.get(c, 0) for c in CATEGORIES}


def _count(model, res: RunResult) -> None:
    seen: dict[int, Any] = {}
    for p in model.parameters():
        seen.setdefault(id(p), p)
    res.params = sum(p.numel() for p in seen.values())
    res.trainable_params = sum(p.numel() for p in seen.values() if p.requires_grad)


@contextlib.contextmanager
def _fake_process_group(world_size: int):
    """A ``"fake"`` process group (no communication) of ``world_size`` ranks, this process
    rank 0, and a 1-D CPU device mesh over it -- built here, BEFORE FakeTensorMode is entered
    (pitfall h: ``init_device_mesh`` under fake mode fails on ``.tolist()``). The group is
    destroyed on exit so that later traces in the same process work."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore  # registers "fake"

    if dist.is_initialized():
        raise Unsupported("a torch.distributed process group is already initialized in this "
                          "process; the FSDP trace needs its own fake one")
    dist.init_process_group("fake", world_size=world_size, rank=0, store=FakeStore())
    try:
        yield init_device_mesh("cpu", (world_size,))
    finally:
        dist.destroy_process_group()


def _decoder_layers(model) -> list:
    """The modules FSDP wraps one by one: instances of the model's ``_no_split_modules``
    classes (the decoder layers of a transformers model)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise Unsupported(f"cannot find the decoder layers of {type(model).__name__} to shard")
    return layers


def _fully_shard(model, run: RunSpec, mesh) -> None:
    """``fully_shard`` each decoder layer, then the root (FSDP2's recommended wrapping); amp =
    fp32 sharded weights + ``MixedPrecisionPolicy(param_dtype=autocast dtype, reduce fp32)``."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kw: dict[str, Any] = {"mesh": mesh}
    if run.precision == "amp" and run.autocast_dtype:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=_dtype(run.autocast_dtype),
                                               reduce_dtype=torch.float32)
    for layer in _decoder_layers(model):
        fully_shard(layer, **kw)
    fully_shard(model, **kw)


def _run_fake(run: RunSpec, res: RunResult, round_bytes: int) -> None:
    if run.fsdp_world_size > 1:
        _run_fake_fsdp(run, res, round_bytes)
        return
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fmest_torch_runner.tracker import StorageTracker

    with _patched_mask_helper():
        fake_mode = FakeTensorMode()
        model = build_model(run, "fake", fake_mode)
        _count(model, res)
        with fake_mode:
            tracker = StorageTracker(round_bytes=round_bytes)
            with tracker:
                res.step_seconds = _train_steps(model, run, "fake", tracker)
    _fill_from_tracker(res, tracker)
    res.peak_bytes = res.tracker_peak_bytes
    res.notes.append("fake trace: CPU kernel semantics, storage sizes exact"
                     + (f", rounded up to {round_bytes} B" if round_bytes > 1 else ""))


#: the window FSDP tracing ignores: FSDPMemTracker reports phantom optimizer state there
#: (pitfall i); steady-state step 2 holds the same optimizer-state bytes
FSDP_IGNORED_WINDOW = "s1_optimizer"


def _run_fake_fsdp(run: RunSpec, res: RunResult, round_bytes: int) -> None:
    """Per-rank (rank 0) memory of FSDP2 full sharding over ``run.fsdp_world_size`` ranks:
    fake process group + ``fully_shard`` per decoder layer and root, two traced steps, the
    tracker following ``UntypedStorage.resize_`` (FSDP frees unsharded weights by
    ``resize_(0)``). The peak of record ignores the step-1 optimizer window (pitfall i)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fmest_torch_runner.tracker import StorageTracker

    if run.steps < 2:
        raise Unsupported("FSDP tracing needs two steps (the step-1 optimizer window is "
                          "ignored)")
    world = run.fsdp_world_size
    with _patched_mask_helper(), _fake_process_group(world) as mesh:
        fake_mode = FakeTensorMode()
        model = build_model(run, "fake", fake_mode)
        _count(model, res)
        with fake_mode:
            _fully_shard(model, run, mesh)
            tracker = StorageTracker(round_bytes=round_bytes, track_resize=True)
            with tracker:
                res.step_seconds = _train_steps(model, run, "fake", tracker)
        del model
    _fill_from_tracker(res, tracker)
    kept = {w: p for w, p in res.phase_peaks_bytes.items() if w != FSDP_IGNORED_WINDOW}
    res.peak_window, res.peak_bytes = max(kept.items(), key=lambda kv: kv[1])
    res.breakdown_bytes = dict(res.phase_breakdowns[res.peak_window])
    grow, shrink = tracker.resizes
    if grow == 0 or shrink == 0:
        raise RuntimeError(f"FSDP trace saw no UntypedStorage.resize_ (grow {grow}, shrink "
                           f"{shrink}): unsharded weights would be miscounted")
    mp = (f", MixedPrecisionPolicy {run.autocast_dtype}/fp32"
          if run.precision == "amp" and run.autocast_dtype else "")
    res.notes.append(
        f"fake trace of FSDP2 full sharding over {world} ranks (fake process group, fully_shard per "
        f"decoder layer + root{mp}); "
        f"per-rank (rank 0) bytes; {grow} storage grows / {shrink} frees by resize_; "
        f"window {FSDP_IGNORED_WINDOW} ignored for the peak; CPU kernel semantics"
        + (f", rounded up to {round_bytes} B" if round_bytes > 1 else ""))


def _allocator_windows(prof) -> dict[str, int]:
    """Max ``total_allocated`` of the CPU allocator events inside each ``fmest::`` window."""
    from torch._C._profiler import _EventType

    windows: list[tuple[int, int, str]] = []
    allocs: list[tuple[int, int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        if n.tag == _EventType.Allocation:
            ef = n.extra_fields
            if str(ef.device).startswith("cpu"):
                allocs.append((n.start_time_ns, ef.total_allocated, ef.alloc_size))
        elif n.name.startswith("fmest::"):
            windows.append((n.start_time_ns, n.end_time_ns, n.name[len("fmest::"):]))
    allocs.sort()
    # c10's profiled CPU memory reporter keeps one process-wide counter: bytes allocated
    # under an earlier profiler session and still alive are already in it. Subtract the
    # counter as it stood before this session's first allocation.
    base = allocs[0][1] - allocs[0][2] if allocs else 0
    out: dict[str, int] = {}
    for start, end, name in windows:
        vals = [a - base for t, a, _size in allocs if start <= t <= end]
        if vals:
            out[name] = max(out.get(name, 0), max(vals))
    return out


def _run_cpu(run: RunSpec, res: RunResult) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from fmest_torch_runner.tracker import StorageTracker

    model = build_model(run, "cpu")
    _count(model, res)
    tracker = StorageTracker()
    box: dict[str, Any] = {}

    def on_phase(window, kind):
        if window is None:
            box.pop("rf").__exit__(None, None, None)
        else:
            rf = record_function(f"fmest::{window}")
            rf.__enter__()
            box["rf"] = rf

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with tracker:
            # start-of-run bytes: params, buffers, inputs (registered inside _train_steps)
            res.step_seconds = _train_steps(model, run, "cpu", tracker, on_phase=on_phase)
    _fill_from_tracker(res, tracker)
    res.start_bytes = tracker.start_bytes
    per_window = _allocator_windows(prof)
    res.phase_peaks_bytes = {w: res.start_bytes + v for w, v in per_window.items()}
    if res.phase_peaks_bytes:
        res.peak_window, res.peak_bytes = max(res.phase_peaks_bytes.items(), key=lambda kv: kv[1])
    res.notes.append("truth = tensor bytes alive at start + max CPU allocator total_allocated "
                     "per phase (torch.profiler profile_memory); breakdown from the tracker; "
                     "step seconds include profiler overhead")
    del torch


def _run_cuda(run: RunSpec, res: RunResult) -> None:
    """UNTESTED ON HARDWARE: written without a GPU (see docs/torch_runner.md)."""
    import torch

    from fmest_torch_runner.tracker import StorageTracker

    if not torch.cuda.is_available():
        raise Unsupported("cuda mode needs a CUDA build of torch and a visible GPU")
    torch.cuda.empty_cache()
    model = build_model(run, "cuda")
    _count(model, res)
    tracker = StorageTracker(round_bytes=512)
    peaks: dict[str, int] = {}
    reserved: dict[str, int] = {}
    current: dict[str, str] = {}

    def on_phase(window, kind):
        if window is None:
            torch.cuda.synchronize()
            w = current.pop("window")
            peaks[w] = max(peaks.get(w, 0), torch.cuda.max_memory_allocated())
            reserved[w] = max(reserved.get(w, 0), torch.cuda.max_memory_reserved())
        else:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            current["window"] = window

    with tracker:
        res.step_seconds = _train_steps(model, run, "cuda", tracker, on_phase=on_phase,
                                        sync=torch.cuda.synchronize)
    _fill_from_tracker(res, tracker)
    res.phase_peaks_bytes = peaks
    res.peak_window, res.peak_bytes = max(peaks.items(), key=lambda kv: kv[1])
    res.reserved_peak_bytes = max(reserved.values())
    res.notes.append("cuda: torch.cuda.max_memory_allocated/reserved per phase "
                     "(code path untested on hardware)")


def run(run: RunSpec, mode: str, *, round_bytes: int = 1) -> RunResult:
    """Run ``run`` in ``mode``; never raises for the run itself -- failures are a status."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    res = RunResult(mode=mode)
    t0 = time.perf_counter()
    try:
        if run.technique == "qlora" and mode != "cuda":
            raise Unsupported(f"QLoRA (bitsandbytes 4-bit) is not supported on this device "
                              f"({mode}); it needs CUDA")
        if mode == "fake":
            _run_fake(run, res, round_bytes)
        elif mode == "cpu":
            _run_cpu(run, res)
        else:
            _run_cuda(run, res)
    except Unsupported as exc:
        res.status, res.error = "unsupported", str(exc)
    except MemoryError as exc:
        res.status, res.error = "oom", f"MemoryError: {exc}"
    except Exception as exc:  # an OOM on CUDA is a result, anything else an error
        name = type(exc).__name__
        if name == "OutOfMemoryError" or "out of memory" in str(exc).lower():
            res.status = "oom"
        else:
            res.status = "error"
        res.error = f"{name}: {exc}"
        if os.environ.get("FMEST_TRACEBACK"):
            traceback.print_exc()
    res.wall_seconds = time.perf_counter() - t0
    return res
