"""A broken third-party plugin, fuzzed in an in-process plugin manager (issue 16).

Hypothesis builds a plugin that breaks one or two hooks in one of several ways (raises,
registers garbage, answers the wrong type, answers NaN / inf / negative numbers, components
that do not sum to the total). Whatever it does, ``fmest estimate``, ``fmest gpus`` and a
plugin's own sub-command keep working: the broken plugin is named (with the
``FMEST_DISABLE_PLUGINS`` hint) and isolated, and the answers come from the sound plugins.
"""

from __future__ import annotations

import contextlib
import io
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fmest_cost_cloud.plugin as cost_cloud_plugin
import fmest_memory_theory.plugin as memory_theory_plugin
import fmest_time_roofline.plugin as time_roofline_plugin
from fmest.cli import main
from fmest.estimates import CostEstimate, MemoryEstimate, Provenance, TimeEstimate
from fmest.gpus import GIB, GpuSpec
from fmest.hookspecs import hookimpl
from fmest.testing import new_engine

FUZZ = settings(max_examples=40, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
NAME = "brokenplugin"
BAD_NUMBERS = (float("nan"), float("inf"), -1.0, -(10**12))

REGISTRATION_HOOKS = ("fmest_register_gpus", "fmest_register_models", "fmest_register_prices",
                      "fmest_register_optimizers", "fmest_register_parallelism",
                      "fmest_register_policies", "fmest_register_estimators",
                      "fmest_register_commands")
ANSWER_HOOKS = ("fmest_estimate_memory", "fmest_estimate_time", "fmest_estimate_cost",
                "fmest_correct_memory")


def _bad_answer(hook: str, how: str, number: float):
    prov = Provenance(basis="analytic")
    if how == "wrong_type":
        return {"total_bytes": 1}
    if hook in ("fmest_estimate_memory", "fmest_correct_memory"):
        if how == "unsummed":
            return MemoryEstimate(total_bytes=10 * GIB, components={"weights": GIB},
                                  provenance=prov)
        return MemoryEstimate(total_bytes=number, components={"weights": number},
                              provenance=prov)
    if hook == "fmest_estimate_time":
        return TimeEstimate(step_seconds=number if how != "unsummed" else 1.0,
                            breakdown={"compute": number}, provenance=prov,
                            total_seconds=number)
    return CostEstimate(usd=number, usd_per_hour=number, provenance=prov)


def make_plugin(breaks: dict[str, str], number: float):
    """A plugin object whose hooks in ``breaks`` misbehave as told."""

    class Broken:
        pass

    plugin = Broken()
    for hook, how in breaks.items():
        if hook in REGISTRATION_HOOKS:
            def register_hook(register, _how=how, _hook=hook):
                if _how == "raise":
                    raise RuntimeError("registration exploded")
                if _hook == "fmest_register_gpus" and _how == "garbage_values":
                    register(GpuSpec(name="Broken-GPU", vendor="x", memory_bytes=-GIB,
                                     bf16_flops_per_s=number))
                    return
                if _hook == "fmest_register_commands":
                    register("brokencmd", "help", "not callable", None)
                    return
                if _hook == "fmest_register_estimators":
                    register(12345)
                    return
                register(object())
            setattr(plugin, hook, hookimpl(register_hook, specname=hook))
        else:
            args = {"fmest_estimate_memory": "job, ctx", "fmest_estimate_time": "job, ctx, memory",
                    "fmest_estimate_cost": "job, ctx, time",
                    "fmest_correct_memory": "job, ctx, candidates"}[hook]

            def answer(_how=how, _hook=hook):
                if _how == "raise":
                    raise ZeroDivisionError("answer exploded")
                return _bad_answer(_hook, _how, number)
            namespace = {"answer": answer}
            exec(f"def impl({args}):\n    return answer()", namespace)
            setattr(plugin, hook, hookimpl(namespace["impl"], specname=hook))
    return plugin


breakages = st.dictionaries(
    st.sampled_from(REGISTRATION_HOOKS + ANSWER_HOOKS),
    st.sampled_from(("raise", "garbage", "garbage_values", "wrong_type", "bad_number",
                     "unsummed")),
    min_size=1, max_size=2)


def run(engine, argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv, engine=engine)
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def finite_and_non_negative(doc, path="$"):
    if isinstance(doc, bool):
        return
    if isinstance(doc, (int, float)):
        assert math.isfinite(doc), path
        assert doc >= 0 or path.endswith(("headroom_bytes", "headroom_p90_bytes")) or path.startswith("$.job."), \
            (path, doc)
    elif isinstance(doc, dict):
        for k, v in doc.items():
            finite_and_non_negative(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            finite_and_non_negative(v, f"{path}[{i}]")


HOWS = ("raise", "garbage", "garbage_values", "wrong_type", "bad_number", "unsummed")
SINGLE = [(hook, how) for hook in REGISTRATION_HOOKS + ANSWER_HOOKS for how in HOWS
          if not (hook in REGISTRATION_HOOKS and how in ("wrong_type", "bad_number", "unsummed"))
          and not (hook in ANSWER_HOOKS and how in ("garbage", "garbage_values"))
          and not (how == "garbage_values" and hook != "fmest_register_gpus")]


@pytest.mark.parametrize("hook,how", SINGLE)
def test_each_way_of_breaking_each_hook(hook, how):
    check_isolated({hook: how}, float("nan"))


@FUZZ
@given(breakages, st.sampled_from(BAD_NUMBERS))
def test_a_broken_plugin_is_named_and_isolated(breaks, number):
    check_isolated(breaks, number)


def check_isolated(breaks, number):
    engine = new_engine((memory_theory_plugin, "memory_theory"),
                        (time_roofline_plugin, "time_roofline"),
                        (cost_cloud_plugin, "cost_cloud"), (make_plugin(breaks, number), NAME))
    rc, out, err = run(engine, ["estimate", "--model", "llama-2-7b-hf", "--seq-len", "512",
                                "--gpu", "H100", "--dataset-tokens", "1e8", "--format", "json"])
    assert rc == 0, err
    doc = json.loads(out)
    finite_and_non_negative(doc)
    # the sound plugins answered every quantity
    for quantity in ("memory", "time", "cost"):
        assert doc[quantity] is not None, (quantity, doc["warnings"])
        assert doc[quantity]["provenance"]["plugin"] != NAME, quantity
    broken_answers = [h for h, how in breaks.items() if h in ANSWER_HOOKS]
    broken_registrations = [h for h, how in breaks.items() if h in REGISTRATION_HOOKS
                            and h != "fmest_register_commands"]
    if broken_answers or broken_registrations:
        named = [w for w in doc["warnings"] if NAME in w]
        assert named and all(f"FMEST_DISABLE_PLUGINS={NAME}" in w for w in named), \
            doc["warnings"]
    # the listings and the other plugins' commands still work
    rc, out, err = run(engine, ["gpus", "--format", "json"])
    assert rc == 0, err
    assert all(g["memory_bytes"] > 0 and "Broken" not in g["name"] for g in json.loads(out))
    rc, out, err = run(engine, ["prices", "--gpu", "H100"])
    assert rc == 0, err


def test_a_raising_subcommand_hook_does_not_take_down_the_cli():
    engine = new_engine((cost_cloud_plugin, "cost_cloud"),
                        (make_plugin({"fmest_register_commands": "raise"}, 0.0), NAME))
    rc, out, err = run(engine, ["prices", "--gpu", "H100"])
    assert rc == 0, err
    rc, out, err = run(engine, ["plugins", "--format", "json"])
    assert rc == 0, err
    assert any(NAME in e for e in json.loads(out)["load_errors"])
