"""Parameter arithmetic shared by every plugin: what is trainable under a technique.

LoRA (Hu et al. 2021, arXiv:2106.09685) adds ``A`` (r x in) and ``B`` (out x r) per adapted
linear: ``r * (in + out)`` parameters per module instance; QLoRA (Dettmers et al. 2023,
arXiv:2305.14314) trains the same adapters on a 4-bit base. LLaMA-Adapter (Zhang et al. 2023,
arXiv:2303.16199) and Adapter-v2 (Gao et al. 2023, arXiv:2304.15010) train a gated prefix per
layer (v2: also a scale and bias per linear output, and the norms), as Lit-GPT implements them.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import attrs

from fmest.errors import InputError
from fmest.job import Job, Training
from fmest.models.spec import LinearModule, ModelSpec
from fmest.objectives import sequences_per_sample

#: PEFT's per-model-type default ``target_modules`` (copied from peft, source in the file).
LORA_DEFAULTS_FILE = Path(__file__).resolve().parents[1] / "data" / "lora_default_targets.json"
#: The targets used when the model type is not in PEFT's table (the Llama-style default
#: fmest used before; peft itself would raise "Please specify `target_modules`").
FALLBACK_LORA_TARGETS = ("q_proj", "v_proj")
LORA_TECHNIQUES = ("lora", "qlora")
#: LLaMA-Adapter (v1) and Adapter-v2 as Lit-GPT trains them (fmest.job.TECHNIQUES); the
#: ``q`` forms run on a quantized base
ADAPTER_TECHNIQUES = ("adapter", "adapter_v2", "qadapter", "qadapter_v2")
ADAPTER_V2_TECHNIQUES = ("adapter_v2", "qadapter_v2")
#: techniques whose frozen base linears are quantized (``training.quantization_bits`` ...)
QUANTIZED_TECHNIQUES = ("qlora", "qadapter", "qadapter_v2")
#: techniques that train a frozen base through small added parameters (PEFT-like)
PEFT_TECHNIQUES = LORA_TECHNIQUES + ADAPTER_TECHNIQUES
#: Lit-GPT ``adapter.Config`` defaults, which finetune/adapter.py and adapter_v2.py keep
#: (``Config.from_name(name=checkpoint_dir.name)``): ``adapter_prompt_length: int = 10``,
#: ``adapter_start_layer: int = 2`` (lit_gpt/adapter.py at Lightning-AI/litgpt
#: 8641822b3249bb94f068c254aa5d13decbc9f0a0)
ADAPTER_PROMPT_LENGTH = 10
ADAPTER_START_LAYER = 2


@functools.lru_cache(maxsize=1)
def peft_default_targets() -> dict[str, tuple[str, ...]]:
    """``model_type`` -> PEFT's default LoRA ``target_modules`` (data/lora_default_targets.json)."""
    data = json.loads(LORA_DEFAULTS_FILE.read_text(encoding="utf-8"))
    return {name: tuple(mods) for name, mods in data["model_types"].items()}


#: What the model family's own fine-tuning script adapts when PEFT has no default for its model
#: type: named in the error, not applied (PEFT itself asks for target_modules)
SCRIPT_LORA_TARGETS: dict[str, tuple[tuple[str, ...], str]] = {
    "qwen": (("c_attn", "c_proj", "w1", "w2"),
             "QwenLM/Qwen's finetune.py (@2df8e8ac) by default"),
}


def default_lora_targets(model: ModelSpec) -> tuple[str, ...]:
    """The ``target_modules`` PEFT picks for ``model`` when the user names none.

    PEFT's ``LoraModel._prepare_adapter_config`` looks the model's ``model_type`` up in
    ``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``; a type missing there falls back to
    ``q_proj``/``v_proj`` when the model has them (peft would ask for ``target_modules``);
    when neither applies an :class:`InputError` lists the model's linear modules.
    """
    table = peft_default_targets()
    if model.model_type in table:
        return table[model.model_type]
    known = set(model.linear_names())
    if all(_matches(t, known) for t in FALLBACK_LORA_TARGETS):
        return FALLBACK_LORA_TARGETS
    hint = SCRIPT_LORA_TARGETS.get(model.model_type)
    raise InputError("training.lora_target_modules",
                     f"PEFT has no default LoRA target modules for model type "
                     f"{model.model_type!r} ({model.name}) and it has no q_proj/v_proj; "
                     "name the modules to adapt"
                     + (f"; {hint[1]} adapts {','.join(hint[0])}" if hint else ""),
                     accepted=sorted(known | {"all-linear"}))


def resolve_lora_targets(job: Job, model: ModelSpec) -> Job:
    """``job`` with empty ``training.lora_target_modules`` (= PEFT's default) made explicit.

    A LoRA/QLoRA job gets :func:`default_lora_targets` (an error when there is none); other
    techniques have no adapters and keep the empty default. Explicit targets are unchanged.
    """
    if job.training.lora_target_modules or job.training.technique not in LORA_TECHNIQUES:
        return job
    targets = default_lora_targets(model)
    return attrs.evolve(job, training=attrs.evolve(job.training, lora_target_modules=targets))


def _matches(target: str, known: set[str]) -> bool:
    return target in known or any(n.endswith("." + target) for n in known)


def lora_modules(model: ModelSpec, training: Training) -> list[LinearModule]:
    """The linear modules the job's LoRA targets; an unmatched target is an error."""
    targets = training.lora_target_modules or default_lora_targets(model)
    mods = model.lora_targets(targets)
    known = set(model.linear_names())
    special = {"all-linear", "all_linear", "linear"}
    missing = [t for t in targets if t not in special and not _matches(t, known)]
    if missing:
        raise InputError("training.lora_target_modules",
                         f"{missing[0]!r} is not a linear module of {model.name}",
                         accepted=sorted(known | {"all-linear"}))
    return mods


def lora_adapter_params(model: ModelSpec, training: Training) -> int:
    """Trainable LoRA parameters: sum of ``r * (in + out)`` over adapted module instances."""
    r = training.lora_rank
    return sum(r * (m.in_features + m.out_features) * m.layers * m.copies
               for m in lora_modules(model, training))


def modules_to_save_params(model: ModelSpec, training: Training) -> int:
    """Parameters of the trainable copies PEFT's ``modules_to_save`` makes beside LoRA
    adapters (``training.lora_modules_to_save``): vocabulary x hidden each for the embedding
    and the output head (``ModulesToSaveWrapper`` deep-copies the module, so a head tied to
    the embedding gets a weight of its own; peft src/peft/utils/other.py
    ``ModulesToSaveWrapper.update``). 0 outside LoRA/QLoRA."""
    if training.technique not in ("lora", "qlora"):
        return 0
    return len(getattr(training, "lora_modules_to_save", ()) or ()) \
        * model.vocab_size * model.hidden_size


def quantized_base(training: Training) -> bool:
    """Whether the job's frozen base linears are quantized (QLoRA, quantized Adapter)."""
    return training.technique in QUANTIZED_TECHNIQUES


def adapter_layers(model: ModelSpec) -> int:
    """Layers that carry LLaMA-Adapter's prefix and gate: ``block_idx >= adapter_start_layer``
    (lit_gpt/adapter.py ``CausalSelfAttention.__init__`` at 8641822)."""
    return max(0, model.num_layers - ADAPTER_START_LAYER)


def adapter_v2_linear_outputs(model: ModelSpec) -> int:
    """Output features summed over every linear instance Adapter-v2 wraps in
    ``AdapterV2Linear`` (attention qkv and proj, every MLP linear, the lm_head: lit_gpt/
    adapter_v2.py at 8641822); a tied head is still its own ``lm_head`` in Lit-GPT."""
    outs = sum(lin.out_features * lin.layers * lin.copies for lin in model.linears)
    if not any(lin.kind == "head" for lin in model.linears):
        outs += model.vocab_size
    return outs


def adapter_new_params(model: ModelSpec, training: Training) -> int:
    """Parameters Adapter adds to the model: per adapter layer an ``adapter_wte``
    (``adapter_prompt_length x n_embd``) and a ``gating_factor`` (one per head); Adapter-v2
    also an ``adapter_bias`` and an ``adapter_scale`` per output feature of every
    ``AdapterV2Linear`` (lit_gpt/adapter.py, adapter_v2.py at 8641822). Check: 573,888 (v1)
    and 2,125,248 (v2) for StableLM-Alpha-3B, as Lit-GPT's resource tables print."""
    if training.technique not in ADAPTER_TECHNIQUES:
        return 0
    prefix = adapter_layers(model) * (ADAPTER_PROMPT_LENGTH * model.hidden_size
                                      + model.num_attention_heads)
    if training.technique in ADAPTER_V2_TECHNIQUES:
        prefix += 2 * adapter_v2_linear_outputs(model)
    return prefix


def adapter_trainable_params(model: ModelSpec, training: Training) -> int:
    """Adapter's trainable parameters (``adapter_filter``): the added ones, and under
    Adapter-v2 every norm's parameters too (``norm_1``, ``norm_2``, ``ln_f``: weights, and
    LayerNorm biases) (lit_gpt/adapter_v2.py at 8641822)."""
    added = adapter_new_params(model, training)
    if training.technique in ADAPTER_V2_TECHNIQUES:
        added += model.param_counts().norms
    return added


def trainable_params(model: ModelSpec, training: Training) -> int:
    """Parameters that receive gradients and optimizer state."""
    if training.technique == "full":
        vision = model.vision
        frozen = 0 if vision is None or getattr(training, "train_vision_tower", False) \
            else vision.tower_params  # a VLM's frozen tower (its projector trains)
        return model.param_counts().total - frozen
    if training.technique in ADAPTER_TECHNIQUES:
        return adapter_trainable_params(model, training)
    return lora_adapter_params(model, training) + modules_to_save_params(model, training)


def total_params(model: ModelSpec, training: Training) -> int:
    """All parameters the training job holds (base + adapters)."""
    base = model.param_counts().total
    if training.technique in ADAPTER_TECHNIQUES:
        return base + adapter_new_params(model, training)
    return base if training.technique == "full" else \
        base + lora_adapter_params(model, training) + modules_to_save_params(model, training)


def tokens_per_sample(model: ModelSpec, training: Training) -> int:
    """Dataset tokens one training sample carries: what ``tokens per step`` (tokens/s) and the
    total steps of a ``dataset_tokens`` workload both count (docs/models.md).

    Decoders (and vision-language models: a dataset's count is of text, the image tokens are
    derived) carry ``seq_len``; encoder-decoders carry their source plus their target,
    ``source_len + target_len``, each defaulting to ``seq_len``. A sample of a pairwise
    preference objective (DPO, ORPO, SimPO, CPO: :mod:`fmest.objectives`) is a chosen and a
    rejected sequence, both trained on: twice that."""
    pair = sequences_per_sample(training.objective)
    if model.is_encoder_decoder:
        return pair * ((training.source_len or training.seq_len)
                       + (training.target_len or training.seq_len))
    return pair * training.seq_len
