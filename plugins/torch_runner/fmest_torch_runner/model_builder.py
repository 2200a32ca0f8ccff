"""Building the training model of a run: the transformers config from the raw dict, the Auto
class for its kind (causal LM, encoder-decoder, LLaVA-style VLM), on meta then fake tensors
(fake mode) or on the device, with gradient checkpointing, LoRA/QLoRA and a frozen vision tower
as the run asks.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Optional

from fmest_torch_runner.lora import build_qlora, wrap_lora
from fmest_torch_runner.records import RunSpec, Unsupported, torch_dtype

if TYPE_CHECKING:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import PretrainedConfig, PreTrainedModel

#: Vision-language model types the runner feeds images to (pixel_values of the tower's fixed
#: image size, image tokens in input_ids); other VLMs need per-model image inputs.
TRACED_VLM_TYPES = ("llava",)


def build_config(run: RunSpec) -> PretrainedConfig:
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
                importlib.import_module("flash_attn")  # installed and importable
                return "flash_attention_2"
            except ImportError:
                return "sdpa"
        return "sdpa"  # CPU sdpa runs a flash kernel: no s^2 tensors, like flash-attention
    return attention


def _meta_to_fake(model: torch.nn.Module, fake_mode: FakeTensorMode) -> None:
    """Replace every meta parameter/buffer (and meta tensor attribute) by a fake CPU tensor,
    keeping tied weights tied. ``Module.to()`` cannot be used on fake params (pitfall a)."""
    import torch

    params: dict[int, torch.nn.Parameter] = {}
    memo: dict[int, torch.Tensor] = {}  # buffers and tensor attributes (one may be the other)

    def fake_like(t: torch.Tensor) -> torch.Tensor:
        with fake_mode:
            return torch.empty(t.shape, dtype=t.dtype, device="cpu")

    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in params:
                params[id(p)] = torch.nn.Parameter(fake_like(p), requires_grad=p.requires_grad)
            mod._parameters[name] = params[id(p)]
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


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers of a transformers model: instances of its ``_no_split_modules``
    classes (what FSDP wraps one by one, what layer replication compares)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise Unsupported(f"cannot find the decoder layers of {type(model).__name__}")
    return layers


def _enable_gc(model: PreTrainedModel, gc_kwargs: dict[str, Any]) -> None:
    # transformers 5 renamed gradient_checkpointing_enable (deprecated alias kept)
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=gc_kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gc_kwargs)


def _auto_class(cfg: PretrainedConfig) -> Any:
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


def _freeze_vision_tower(model: torch.nn.Module, run: RunSpec) -> None:
    """LLaVA-style fine-tuning freezes the vision tower (the projector trains)."""
    if run.train_vision_tower or run.technique != "full":
        return
    for name, param in model.named_parameters():
        if "vision_tower" in name:
            param.requires_grad_(False)


def build_model(run: RunSpec, mode: str,
                fake_mode: Optional[FakeTensorMode] = None) -> torch.nn.Module:
    """The training model (peft-wrapped for LoRA/QLoRA), in train mode, on the device;
    ``fake_mode`` (fake mode only) owns its fake tensors."""
    import torch

    cfg = build_config(run)
    auto_class = _auto_class(cfg)
    kwargs = dict(dtype=torch_dtype(run.param_dtype),
                  attn_implementation=_attn_impl(run.attention, mode))
    gc_kwargs = {"use_reentrant": False}
    base: PreTrainedModel
    model: torch.nn.Module
    if mode == "fake":
        if fake_mode is None:
            raise ValueError("fake mode builds under a FakeTensorMode: pass fake_mode")
        # build on meta (milliseconds, no init kernels), wrap with peft there, then swap in
        # fake CPU tensors (pitfall a: fake params cannot be moved or cast)
        with torch.device("meta"):
            model = base = auto_class.from_config(cfg, **kwargs)
            if run.gradient_checkpointing:
                _enable_gc(base, gc_kwargs)
            if run.technique == "lora":
                model = wrap_lora(base, run)
        _meta_to_fake(model, fake_mode)
    else:
        device = "cuda" if mode == "cuda" else "cpu"
        if run.technique == "qlora":
            if mode != "cuda":
                raise Unsupported("QLoRA needs CUDA (bitsandbytes)")
            model = build_qlora(auto_class.from_config(cfg, **kwargs), run, device, gc_kwargs)
        else:
            with torch.device(device):
                model = base = auto_class.from_config(cfg, **kwargs)
            # unlike the meta build, adapters are added outside the device context: peft puts
            # them beside the weights they adapt
            if run.gradient_checkpointing:
                _enable_gc(base, gc_kwargs)
            if run.technique == "lora":
                model = wrap_lora(base, run)
    _freeze_vision_tower(model, run)
    model.train()
    return model
