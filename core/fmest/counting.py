"""Parameter arithmetic shared by every plugin: what is trainable under a technique.

LoRA (Hu et al. 2021, arXiv:2106.09685) adds ``A`` (r x in) and ``B`` (out x r) per adapted
linear: ``r * (in + out)`` parameters per module instance; QLoRA (Dettmers et al. 2023,
arXiv:2305.14314) trains the same adapters on a 4-bit base.
"""

from __future__ import annotations

from fmest.errors import InputError
from fmest.job import Training
from fmest.models.spec import LinearModule, ModelSpec


def lora_modules(model: ModelSpec, training: Training) -> list[LinearModule]:
    """The linear modules the job's LoRA targets; an unmatched target is an error."""
    mods = model.lora_targets(training.lora_target_modules)
    known = set(model.linear_names())
    special = {"all-linear", "all_linear", "linear"}
    missing = [t for t in training.lora_target_modules
               if t not in special and t not in known and not any(n.endswith("." + t) for n in known)]
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


def trainable_params(model: ModelSpec, training: Training) -> int:
    """Parameters that receive gradients and optimizer state."""
    if training.technique == "full":
        vision = model.vision
        frozen = 0 if vision is None or getattr(training, "train_vision_tower", False) \
            else vision.tower_params  # a VLM's frozen tower (its projector trains)
        return model.param_counts().total - frozen
    return lora_adapter_params(model, training)


def total_params(model: ModelSpec, training: Training) -> int:
    """All parameters the training job holds (base + adapters)."""
    base = model.param_counts().total
    return base if training.technique == "full" else base + lora_adapter_params(model, training)
