"""Registers ``fmest fm-training-estimator``: IBM fm-training-estimator's CLI (flat config or
EstimateInput in, its flat JSON answer out), :mod:`fmest.compat.fm_training_estimator.ui.cli`."""

from fmest.hookspecs import hookimpl


@hookimpl
def fmest_register_commands(register):
    from fmest.plugins import lazy_command

    register("fm-training-estimator",
             "fm-training-estimator's CLI: its flat config or EstimateInput in, its JSON "
             "answer out (docs/compat.md)",
             *lazy_command("fmest.compat.fm_training_estimator.ui.cli", "add_arguments",
                           "run_command"))
