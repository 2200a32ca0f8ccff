"""The optimizer a run steps and its state: which optimizers the runner supports, building one,
the fp32 master copies of ``master`` precision, and the update that labels the state it creates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from fmest_torch_runner.records import RunSpec, Unsupported

if TYPE_CHECKING:
    import torch

    from fmest.job import Training
    from fmest_torch_runner.tracker import StorageTracker

#: the optimizers the runner can instantiate (canonical fmest names)
SUPPORTED_OPTIMIZERS = ("adamw", "adamw_torch_fused", "sgd", "sgd_momentum")
#: ``optimizer_impl`` -> torch's (``foreach``, ``fused``) arguments (None: torch's default)
_IMPL_FLAGS: dict[str, tuple[Optional[bool], Optional[bool]]] = {
    "foreach": (True, False), "fused": (None, True), "for_loop": (False, False)}


def optimizer_choice(training: Training, optimizer_name: Optional[str]) -> tuple[str, str]:
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


def make_optimizer(params: Sequence[torch.Tensor], run: RunSpec) -> torch.optim.Optimizer:
    import torch

    foreach, fused = _IMPL_FLAGS[run.optimizer_impl]
    if run.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-5, foreach=foreach, fused=fused)
    if run.optimizer in ("sgd", "sgd_momentum"):
        mom = 0.9 if run.optimizer == "sgd_momentum" else 0.0
        return torch.optim.SGD(params, lr=1e-5, momentum=mom, foreach=foreach, fused=fused)
    raise Unsupported(f"optimizer {run.optimizer!r}")


def master_copies(params: list[torch.nn.Parameter],
                  tracker: StorageTracker) -> list[torch.Tensor]:
    """fp32 copies of the trainable parameters the optimizer updates under ``master``
    precision, counted as optimizer state."""
    masters = [param.detach().float().requires_grad_(False) for param in params]
    tracker.relabel(masters, "optimizer_state")
    return masters


def optimizer_step(params: list[torch.nn.Parameter], masters: Optional[list[torch.Tensor]],
                   optimizer: torch.optim.Optimizer, tracker: StorageTracker) -> None:
    """The update (on the fp32 ``masters`` when given, copied back into ``params``), the state
    it holds labelled ``optimizer_state``, then ``zero_grad(set_to_none=True)``."""
    import torch

    if masters is not None:
        for param, master in zip(params, masters, strict=True):
            master.grad = param.grad.float() if param.grad is not None else None
            param.grad = None
    optimizer.step()
    tracker.relabel([value for st in optimizer.state.values() for value in st.values()
                     if isinstance(value, torch.Tensor)], "optimizer_state")
    if masters is not None:
        with torch.no_grad():
            for param, master in zip(params, masters, strict=True):
                param.copy_(master)
                master.grad = None
    optimizer.zero_grad(set_to_none=True)
