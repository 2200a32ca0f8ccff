"""The ``cost_cloud`` plugin (plugins/cost_cloud): price table, cost estimate, ``fmest prices``.

Needs the plugin installed (``pip install -e plugins/cost_cloud``). Every test builds a fresh
plugin manager; "today" is frozen through arguments or ``FMEST_PRICE_TODAY``.
"""

from __future__ import annotations

import csv
import json
from datetime import date
from importlib import resources
from importlib.metadata import entry_points

import pytest

pytest.importorskip("fmest_cost_cloud", reason="pip install -e plugins/cost_cloud")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st

import fmest_cost_cloud.plugin as cost_plugin  # noqa: E402
from fmest.cli import main  # noqa: E402
from fmest.errors import DuplicateRegistrationError, InputError  # noqa: E402
from fmest.estimates import Provenance, TimeEstimate  # noqa: E402
from fmest.hookspecs import hookimpl  # noqa: E402
from fmest.job import PRICE_TYPES, Hardware, Job, Pricing, Training  # noqa: E402
from fmest.prices import PriceQuote  # noqa: E402
from fmest.testing import new_engine  # noqa: E402
from fmest_cost_cloud.command import gpu_names_matching  # noqa: E402
from fmest_cost_cloud.cost import billed_hours, estimate_cost, instances_needed  # noqa: E402
from fmest_cost_cloud.table import (  # noqa: E402
    COLUMNS,
    PriceTableError,
    is_stale,  # noqa: E402
    read_quotes,
    shipped_quotes,
)

TODAY = date(2026, 11, 22)  # the day the shipped table was built
TEN_HOURS = 36000.0


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for var in ("FMEST_PRICE_TODAY", "FMEST_PRICE_MAX_AGE_DAYS"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def engine():
    return new_engine(cost_plugin)


def time_of(total_seconds=TEN_HOURS):
    return TimeEstimate(step_seconds=1.0, breakdown={"compute": 1.0},
                        provenance=Provenance(basis="analytic"), total_seconds=total_seconds,
                        total_steps=None if total_seconds is None else total_seconds)


def job_on(gpu="H100", gpus=8, **pricing):
    nodes = 1 if gpus <= 8 else 2
    # T4 (Turing) has no bf16 matrix units: its jobs run fp16
    training = Training(dtype="fp16") if gpu == "T4" else Training()
    return Job(model="llama-3.1-8b", hardware=Hardware(gpu=gpu, gpus_per_node=gpus // nodes,
                                                       nodes=nodes), pricing=Pricing(**pricing),
               training=training)


def cost(engine, job, total_seconds=TEN_HOURS, **kw):
    kw.setdefault("on", TODAY)
    return estimate_cost(job, engine.context(job), time_of(total_seconds), **kw)


def raw_rows():
    text = resources.files("fmest_cost_cloud").joinpath("prices.csv").read_text("utf-8")
    return list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))


# -- the shipped table ----------------------------------------------------------------------

def test_table_columns_and_row_count():
    rows = raw_rows()
    assert tuple(rows[0].keys()) == COLUMNS
    assert len(rows) == len(shipped_quotes()) == 141


def test_table_covers_the_researched_providers():
    providers = {q.provider for q in shipped_quotes()}
    assert providers == {"AWS", "GCP", "Azure", "Lambda", "CoreWeave", "RunPod", "Nebius",
                         "Vast.ai", "Crusoe", "DataCrunch"}


def test_every_gpu_resolves_in_the_gpu_registry(engine):
    for q in shipped_quotes():
        spec = engine.registries.gpus.find(q.gpu)
        assert spec is not None, q
        assert spec.name == q.gpu, "ship canonical GPU names"


def test_per_gpu_price_is_instance_price_over_gpus():
    for r in raw_rows():
        derived = float(r["usd_per_instance_hour"]) / int(r["gpus_per_instance"])
        assert abs(derived - float(r["usd_per_gpu_hour"])) <= 1e-5, r


def test_prices_are_plausible():
    for q in shipped_quotes():
        assert 0.10 <= q.usd_per_gpu_hour <= 25.0, q
        assert q.gpus_per_instance in (1, 2, 4, 8, 16), q
        assert q.price_type in PRICE_TYPES
        seen = date.fromisoformat(q.observed)
        assert date(2025, 1, 1) <= seen <= TODAY, q
        assert all(u.startswith("https://") for u in q.source.split(" | ")), q


def test_keys_are_unique_and_discounts_are_below_on_demand():
    quotes = shipped_quotes()
    keys = [(q.provider.lower(), q.instance.lower(), q.region.lower(), q.price_type)
            for q in quotes]
    assert len(keys) == len(set(keys))
    on_demand = {(q.provider, q.instance, q.region): q.usd_per_instance_hour
                 for q in quotes if q.price_type == "on_demand"}
    for q in quotes:
        base = on_demand.get((q.provider, q.instance, q.region))
        if q.price_type != "on_demand" and base is not None:
            assert q.usd_per_instance_hour < base, q


def test_mapped_price_types_say_so():
    for r in raw_rows():
        if r["price_type"] in ("reserved_1y", "reserved_3y"):
            assert "mapped from" in r["notes"], r


def test_aws_p4_p5_rows_are_post_june_2025_cut():
    """AWS cut P4d/P4de/P5/P5en on-demand prices by up to 45% in June 2025; p5.48xlarge went
    from 98.32 to 55.04 USD/h (AWS Price List via datareceipts 109-gpu-pricing, retrieved
    2026-11-09; https://www.usage.ai/blogs/aws/ai-ml-cost/llm-cost-optimization-aws/)."""
    aws = [q for q in shipped_quotes() if q.provider == "AWS"
           and q.instance.split(".")[0] in ("p4d", "p4de", "p5", "p5en")]
    assert len(aws) == 15
    for q in aws:
        assert "June 2025" in q.notes and q.observed >= "2025-07-01", q
    p5 = {(q.instance, q.region, q.price_type): q for q in aws}
    assert p5["p5.48xlarge", "us-east-1", "on_demand"].usd_per_instance_hour == 55.04
    assert p5["p4d.24xlarge", "us-east-1", "on_demand"].usd_per_instance_hour == 21.957642
    assert p5["p5en.48xlarge", "us-east-1", "on_demand"].usd_per_instance_hour == 63.296


@pytest.mark.parametrize("column,value,message", [
    ("usd_per_gpu_hour", "7.0", "usd_per_gpu_hour: 7.0 is not"),
    ("price_type", "reserved_1yr", "price_type: 'reserved_1yr' is not one of"),
    ("observed", "21/01/2026", "observed: expected an ISO date"),
    ("gpus_per_instance", "eight", "gpus_per_instance: expected a whole number"),
])
def test_bad_rows_fail_at_load_naming_line_and_column(column, value, message):
    row = dict(provider="AWS", instance="p5.48xlarge", gpu="H100", gpus_per_instance="8",
               region="us-east-1", price_type="on_demand", usd_per_instance_hour="55.04",
               usd_per_gpu_hour="6.88", observed="2026-11-09", source_url="https://x",
               notes="")
    row[column] = value
    text = "# comment\n" + ",".join(COLUMNS) + "\n" + ",".join(row[c] for c in COLUMNS) + "\n"
    with pytest.raises(PriceTableError, match=f"mine.csv line 3: {message}"):
        list(read_quotes(text, "mine.csv"))


# -- formulas -------------------------------------------------------------------------------

@pytest.mark.parametrize("world,per,expected", [(12, 8, 2), (16, 8, 2), (1, 8, 1), (8, 1, 8),
                                                (9, 4, 3)])
def test_instances_needed(world, per, expected):
    assert instances_needed(world, per) == expected


@given(st.integers(1, 4096), st.sampled_from([1, 2, 4, 8, 16]))
def test_instances_cover_the_world_and_no_more(world, per):
    n = instances_needed(world, per)
    assert n * per >= world > (n - 1) * per


def test_billed_hours():
    assert billed_hours(7200.0) == 2.0
    assert billed_hours(36000.0, checkpoint_overhead_fraction=0.1,
                        startup_overhead_hours=0.5) == pytest.approx(11.5)
    assert billed_hours(None, startup_overhead_hours=1.0) is None


# -- the estimate ---------------------------------------------------------------------------

def test_twelve_gpus_on_eight_gpu_instances_rent_two(engine):
    c = cost(engine, job_on(gpus=12, provider="coreweave"))  # only 8-GPU HGX nodes
    assert (c.provider, c.instance, c.instances, c.gpus_per_instance) == \
        ("CoreWeave", "NVIDIA HGX H100", 2, 8)
    assert c.usd_per_hour == pytest.approx(2 * 49.24)
    assert c.usd == pytest.approx(2 * 49.24 * 10)
    assert c.gpu_hours == pytest.approx(16 * 10)
    assert c.provenance.basis == "quoted"
    assert any("4 idle" in n for n in c.notes)


def test_node_sized_instances_are_preferred_and_says_so(engine):
    # 12 x p5.4xlarge (1 GPU, 82.56/h) would bill less than 2 x p5.48xlarge (110.08/h), but
    # the layout's 6-GPU nodes need instances with >= 6 GPUs on one node
    c = cost(engine, job_on(gpus=12, provider="aws", region="us-east-1"))
    assert (c.instance, c.instances, c.usd_per_hour) == ("p5.48xlarge", 2, pytest.approx(110.08))
    assert any(">= 6 GPUs" in n for n in c.notes)


def test_single_gpu_job_takes_the_cheapest_single_gpu_offer(engine):
    c = cost(engine, job_on(gpus=1, provider="aws", region="us-east-1"))
    assert c.instance == "p5.4xlarge" and c.instances == 1


def test_overheads_stretch_the_billed_hours(engine):
    job = job_on(provider="aws", region="us-east-1", checkpoint_overhead_fraction=0.1,
                 startup_overhead_hours=0.5)
    assert cost(engine, job).usd == pytest.approx(55.04 * (10 * 1.1 + 0.5))


def test_no_run_time_prices_only_the_hour(engine):
    c = cost(engine, job_on(provider="aws", region="us-east-1"), total_seconds=None)
    assert c.usd is None and c.gpu_hours is None
    assert c.usd_per_hour == pytest.approx(55.04)


def test_price_per_gpu_hour_override(engine):
    c = cost(engine, job_on(gpus=12, provider="aws", price_per_gpu_hour=2.0))
    assert (c.provider, c.instances, c.gpus_per_instance) == ("custom", 12, 1)
    assert c.usd_per_hour == pytest.approx(24.0)
    assert c.usd == pytest.approx(240.0)
    assert any("ignored" in n for n in c.notes)
    # an accelerator nobody rents can still be priced with an override
    assert cost(engine, job_on(gpu="TPU-v4", price_per_gpu_hour=1.5)).usd_per_hour == \
        pytest.approx(12.0)


def test_custom_provider_needs_a_price(engine):
    with pytest.raises(InputError, match="pricing.price_per_gpu_hour"):
        cost(engine, job_on(provider="custom"))


def test_region_filter(engine):
    c = cost(engine, job_on(gpu="H200", provider="AWS", region="US-WEST-1"))
    assert (c.instance, c.region, c.usd_per_hour) == ("p5en.48xlarge", "us-west-1", 79.12)
    with pytest.raises(InputError) as err:
        cost(engine, job_on(gpu="H200", provider="aws", region="mars-1"))
    assert err.value.field == "pricing.region"
    assert "us-east-1" in err.value.accepted and "eu-north-1" in err.value.accepted


def test_price_type_filter(engine):
    c = cost(engine, job_on(gpu="H200", provider="aws", region="us-east-2", price_type="spot"))
    assert c.usd_per_hour == pytest.approx(26.5714) and c.price_type == "spot"
    assert any("interrupted" in n for n in c.notes)
    with pytest.raises(InputError) as err:
        cost(engine, job_on(provider="coreweave", price_type="reserved_1y"))
    assert err.value.field == "pricing.price_type"
    assert err.value.accepted == ["on_demand", "spot"]


def test_unknown_provider_names_those_renting_the_gpu(engine):
    with pytest.raises(InputError) as err:
        cost(engine, job_on(gpu="L4", provider="lambda"))
    assert err.value.field == "pricing.provider"
    assert err.value.accepted == ["AWS", "GCP", "cheapest"]
    assert "pricing.provider" in str(err.value) and "\n" not in str(err.value)


def test_cheapest_is_the_lowest_bill_for_the_job(engine):
    job = job_on(gpus=8, provider="cheapest")
    ctx = engine.context(job)
    c = estimate_cost(job, ctx, time_of(), on=TODAY)
    rows = [q for q in engine.registries.prices.values()
            if q.gpu == "H100-SXM-80GB" and q.price_type == "on_demand"]
    best = min(instances_needed(8, q.gpus_per_instance) * q.usd_per_instance_hour for q in rows
               if q.gpus_per_instance >= 8 and not is_stale(q.observed, TODAY, 180))
    assert c.usd_per_hour == pytest.approx(best)
    # within one provider, among node-sized instances (>= 6 GPUs for 6 per node), the one
    # that bills least for 12 GPUs wins: 2 x 8x H100 (63.84/h); 4x and 1x offers are skipped
    c = cost(engine, job_on(gpus=12, provider="Lambda"))
    assert (c.instance, c.instances, c.usd_per_hour) == ("8x H100 SXM", 2, pytest.approx(63.84))


def test_no_provider_means_cheapest_on_demand(engine):
    c = cost(engine, job_on(gpu="A100-80GB", gpus=8))
    rows = [q for q in engine.registries.prices.values()
            if q.gpu == "A100-SXM-80GB" and q.price_type == "on_demand"]
    assert c.price_type == "on_demand"
    assert c.usd_per_hour == pytest.approx(
        min(instances_needed(8, q.gpus_per_instance) * q.usd_per_instance_hour for q in rows
            if q.gpus_per_instance >= 8 and not is_stale(q.observed, TODAY, 180)))
    assert any("no pricing.provider given" in n for n in c.notes)


def test_gpu_nobody_rents(engine):
    assert cost(engine, job_on(gpu="T4")) is None  # no pricing asked: no answer, no error
    for asked in ({"provider": "aws"}, {"provider": "cheapest"}, {"region": "us-east-1"},
                  {"price_type": "spot"}):
        with pytest.raises(InputError) as err:
            cost(engine, job_on(gpu="T4", **asked))
        assert err.value.field == "hardware.gpu"
        assert "H100-SXM-80GB" in err.value.accepted and "T4-16GB" not in err.value.accepted


def test_stale_marking(engine, monkeypatch):
    crusoe = job_on(gpu="H200", gpus=1, provider="crusoe")  # observed 2025-05-21
    c = cost(engine, crusoe)
    assert c.stale and c.price_observed == "2025-05-21"
    assert any("more than 180 days" in n for n in c.notes)
    assert not cost(engine, crusoe, on=date(2025, 6, 1)).stale
    assert not cost(engine, crusoe, max_age=10_000).stale
    # through the environment, as the CLI and the engine use it
    monkeypatch.setenv("FMEST_PRICE_TODAY", "2025-11-17")  # 180 days after 2025-05-21
    assert not estimate_cost(crusoe, engine.context(crusoe), time_of()).stale
    monkeypatch.setenv("FMEST_PRICE_TODAY", "2025-11-18")
    assert estimate_cost(crusoe, engine.context(crusoe), time_of()).stale
    monkeypatch.setenv("FMEST_PRICE_MAX_AGE_DAYS", "365")
    assert not estimate_cost(crusoe, engine.context(crusoe), time_of()).stale
    monkeypatch.setenv("FMEST_PRICE_MAX_AGE_DAYS", "half a year")
    with pytest.raises(InputError, match="FMEST_PRICE_MAX_AGE_DAYS"):
        estimate_cost(crusoe, engine.context(crusoe), time_of())


def test_is_stale_boundaries():
    assert not is_stale("2026-05-26", TODAY, 180)  # exactly 180 days old
    assert is_stale("2026-05-25", TODAY, 180)
    assert is_stale("", TODAY, 180)  # no date: treated as stale


# -- through the engine ---------------------------------------------------------------------

class FakeTime:
    """A throwaway time plugin: every job runs ten hours."""

    @hookimpl
    def fmest_estimate_time(self, job, ctx, memory):
        return time_of()


def test_engine_asks_the_plugin_and_stamps_its_name():
    engine = new_engine((cost_plugin, "cost_cloud"), (FakeTime(), "fake_time"))
    report = engine.estimate(job_on(gpus=12, provider="coreweave"))
    assert report.cost.provenance.plugin == "cost_cloud"
    assert report.cost.usd == pytest.approx(2 * 49.24 * 10)
    assert "cost_cloud" in report.decisions["cost"].rule
    # a GPU nobody rents: memory and time still come back, cost is simply absent
    report = engine.estimate(job_on(gpu="T4"))
    assert report.time is not None and report.cost is None


def test_engine_surfaces_bad_pricing_input():
    engine = new_engine((cost_plugin, "cost_cloud"), (FakeTime(), "fake_time"))
    with pytest.raises(InputError, match="pricing.provider"):
        engine.estimate(job_on(provider="nosuchcloud"))


def test_entry_point_is_declared():
    eps = {ep.name: ep.value for ep in entry_points(group="fmest")}
    assert eps.get("cost_cloud") == "fmest_cost_cloud.plugin"


# -- a third-party price plugin -------------------------------------------------------------

def acme_quote(**over):
    kw = dict(provider="Acme", instance="acme-8xh100", gpu="h100-sxm", gpus_per_instance=8,
              region="moon-1", price_type="on_demand", usd_per_instance_hour=8.0,
              observed="2026-11-01", source="https://acme.example/prices")
    kw.update(over)
    return PriceQuote(**kw)


class AcmePrices:
    def __init__(self, *quotes):
        self.quotes = quotes or (acme_quote(),)

    @hookimpl
    def fmest_register_prices(self, register):
        for q in self.quotes:
            register(q)


def test_third_party_provider_is_priced_and_listed(capsys):
    engine = new_engine((cost_plugin, "cost_cloud"), (AcmePrices(), "acme_prices"))
    c = cost(engine, job_on(provider="acme"))
    assert (c.provider, c.usd_per_hour) == ("Acme", 8.0)
    assert "acme_prices" in c.provenance.detail
    assert cost(engine, job_on()).provider == "Acme"  # now the cheapest H100 on demand
    assert main(["prices", "--provider", "ACME", "--format", "json"], engine=engine) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["plugin"], row["gpu_name"], row["usd_per_gpu_hour"]) == \
        ("acme_prices", "H100-SXM-80GB", 1.0)


def test_ties_break_on_provider_not_registration_order():
    a = acme_quote(provider="Zeta", instance="z")
    b = acme_quote(provider="Alpha", instance="a")
    for order in ((a, b), (b, a)):
        engine = new_engine((AcmePrices(*order), "tp"), (cost_plugin, "cost_cloud"))
        assert cost(engine, job_on(provider="cheapest")).provider == "Alpha"


def test_duplicate_price_key_names_both_plugins():
    dup = acme_quote(provider="aws", instance="P5.48XLARGE", region="us-east-1")
    with pytest.raises(DuplicateRegistrationError) as err:
        new_engine((cost_plugin, "cost_cloud"), (AcmePrices(dup), "acme_prices"))
    assert "cost_cloud" in str(err.value) and "acme_prices" in str(err.value)


# -- fmest prices ---------------------------------------------------------------------------

def run_cli(engine, capsys, *argv):
    code = main(["prices", *argv], engine=engine)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_prices_table(engine, capsys, monkeypatch):
    monkeypatch.setenv("FMEST_PRICE_TODAY", TODAY.isoformat())
    code, out, err = run_cli(engine, capsys, "--gpu", "H100", "--provider", "aws")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["provider", "instance", "gpu", "GPUs", "region", "price",
                                "type", "$/GPU-h", "$/instance-h", "observed"]
    body = [line for line in lines[1:] if line.startswith("AWS")]
    assert len(body) == 2  # p5.48xlarge and p5.4xlarge
    assert any("p5.48xlarge" in line and "55.0400" in line and "6.8800" in line
               for line in body)
    # p5.4xlarge was last observed 2026-01-21: older than 180 days on 2026-11-22
    assert [line.endswith("STALE") for line in body] == [False, True]
    # the columns are aligned: every price column ends at the same offset
    ends = {line.index("2026-") for line in body}
    assert len(ends) == 1
    assert "STALE (1)" in lines[-1] and "180 days before 2026-11-22" in lines[-1]


def test_prices_gpu_filter_resolves_aliases_and_word_prefixes(engine):
    gpus = engine.registries.gpus
    assert gpu_names_matching(gpus, "H100") >= {"H100-SXM-80GB", "H100-PCIE-80GB",
                                                 "H100-NVL-94GB"}
    assert gpu_names_matching(gpus, "h100 sxm") == {"H100-SXM-80GB", "H100-SXM-96GB"}
    assert gpu_names_matching(gpus, "A100-80GB") == {"A100-SXM-80GB"}  # alias only
    assert "A100-SXM-80GB" not in gpu_names_matching(gpus, "A10")
    assert gpu_names_matching(gpus, "NVIDIA H100 80GB HBM3") == {"H100-SXM-80GB"}


def test_prices_json_and_sort(engine, capsys):
    code, out, _ = run_cli(engine, capsys, "--gpu", "L4", "--sort", "price", "--format",
                           "json")
    rows = json.loads(out)
    assert code == 0 and {r["gpu_name"] for r in rows} == {"L4-24GB"}
    prices = [r["usd_per_gpu_hour"] for r in rows]
    assert prices == sorted(prices)
    assert {"source_url", "notes", "observed", "stale", "age_days", "plugin"} <= set(rows[0])


@pytest.mark.parametrize("argv,flag", [
    (["--gpu", "H999"], "--gpu"),
    (["--gpu", "TPU-v4"], "--gpu"),
    (["--provider", "nosuchcloud"], "--provider"),
    (["--provider", "lambda", "--price-type", "spot"], "--price-type"),
    (["--price-type", "hourly"], "--price-type"),
    (["--provider", "azure", "--region", "us-east-1"], "--region"),
])
def test_prices_bad_filters_exit_2_with_one_line(engine, capsys, argv, flag):
    code, out, err = run_cli(engine, capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith(f"fmest: error: {flag}:") and err.count("\n") == 1
    assert "accepted:" in err


def test_cheapest_sets_stale_offers_aside_when_current_ones_exist(engine):
    job = job_on(gpus=8, provider="cheapest")
    ctx = engine.context(job)
    current = estimate_cost(job, ctx, time_of(), on=TODAY, max_age=180)
    anything = estimate_cost(job, ctx, time_of(), on=TODAY, max_age=100_000)
    assert not current.stale and any("stale offer(s)" in n for n in current.notes)
    assert anything.usd_per_hour <= current.usd_per_hour
