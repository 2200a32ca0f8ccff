"""The page at ``/`` in a real browser (headless Chromium through selenium and chromedriver).

Pick a preset, change the micro-batch and the GPU, then read the chart's bytes, the verdict and
the step time from the DOM and check they equal ``POST /v1/estimate``'s answer for the same
job; copy to configuration B, change it, check B; reload the shared URL and check the state
comes back. A screenshot is saved under the test's tmp dir.

The page shows what it assumed (the "Assumed" panel equals the answer's job), a loading state
with a cancel button while a request runs, an error beside its field, an inference layout in
inference mode, and no horizontal overflow at 390 and 1280 px (screenshots:
docs/img/page-390.png, docs/img/page-1280.png).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'fmest[serve]'")
pytest.importorskip("uvicorn", reason="needs the serve extra")
httpx = pytest.importorskip("httpx", reason="needs the serve extra")
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (test extra)")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser",
                                                       "google-chrome")) if p), None)
CHROMEDRIVER = shutil.which("chromedriver") or next(
    (p for p in ("/usr/lib/chromium/chromedriver",) if Path(p).is_file()), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason=f"headless Chromium not installed (chromium: {CHROMIUM}, chromedriver: "
           f"{CHROMEDRIVER}); on Debian: apt-get install chromium chromium-driver")

PRESET = "mistralai/Mistral-7B-v0.1"


@pytest.fixture(scope="module")
def server():
    from fmest.serve.app import create_app
    from fmest.serve.local import serving

    with serving(create_app()) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1500,1700"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def _wait_for(driver, slot: str, body: dict) -> None:
    """Until the slot shows the answer to exactly ``body``."""
    def ready(d):
        box = d.find_element(By.CSS_SELECTOR, f"#slot-{slot} .results")
        sent = box.get_attribute("data-request")
        return (box.get_attribute("data-state") == "ok" and sent
                and json.loads(sent) == body)
    WebDriverWait(driver, 30).until(ready)


def _set(driver, slot: str, field: str, value: str) -> None:
    box = driver.find_element(By.CSS_SELECTOR, f"#slot-{slot} [data-field='{field}']")
    if box.tag_name == "select":
        Select(box).select_by_value(value)
    elif value == "":  # clear() alone fires no change event
        box.send_keys(Keys.CONTROL, "a", Keys.NULL, Keys.BACKSPACE, Keys.TAB)
    else:
        box.clear()
        box.send_keys(value, Keys.TAB)  # the page estimates on change


def _dom_answer(driver, slot: str) -> dict:
    root = driver.find_element(By.ID, f"slot-{slot}")
    verdict = root.find_element(By.CSS_SELECTOR, ".verdict")
    metric = {m.get_attribute("data-metric"): m.get_attribute("data-value")
              for m in root.find_elements(By.CSS_SELECTOR, "dd[data-metric]")}
    return {
        "components": {s.get_attribute("data-component"): int(s.get_attribute("data-bytes"))
                       for s in root.find_elements(By.CSS_SELECTOR, ".chart rect.seg")},
        "phases": {p.get_attribute("data-phase"): int(p.get_attribute("data-bytes"))
                   for p in root.find_elements(By.CSS_SELECTOR, ".chart rect.phase")},
        "capacity": int(root.find_element(By.CSS_SELECTOR, ".chart line.capacity")
                        .get_attribute("data-bytes")),
        "fits": verdict.get_attribute("data-fits"),
        "max_micro_batch": int(verdict.get_attribute("data-max-micro-batch")),
        "verdict_text": verdict.text,
        "total_bytes": int(metric["total_bytes"]),
        "step_seconds": float(metric["step_seconds"]),
        "tokens_per_second": float(metric["tokens_per_second"]),
    }


def _check_equal(dom: dict, api: dict) -> None:
    mem = api["memory"]
    assert dom["components"] == {k: v for k, v in mem["components"].items() if v > 0}
    assert dom["phases"] == mem["phase_peaks_bytes"]
    assert dom["capacity"] == mem["gpu_memory_bytes"] == api["gpu"]["memory_bytes"]
    assert dom["total_bytes"] == mem["total_bytes"]
    assert dom["fits"] == str(mem["fits"]).lower()
    assert dom["max_micro_batch"] == mem["max_micro_batch"]
    assert mem["verdict"] in dom["verdict_text"]
    assert f"largest micro-batch that fits: {mem['max_micro_batch']}" in dom["verdict_text"]
    assert dom["step_seconds"] == api["time"]["step_seconds"]
    assert dom["tokens_per_second"] == api["tokens"]["tokens_per_second"]


def test_page_matches_the_api(server, browser, tmp_path):
    browser.get(server + "/")
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(
        By.CSS_SELECTOR, "#slot-a .results[data-state='ok']"))
    Select(browser.find_element(By.CSS_SELECTOR, "#slot-a select.preset")).select_by_value(PRESET)
    _set(browser, "a", "per_device_batch", "4")
    _set(browser, "a", "gpu", "A100-80GB")
    body_a = {"model": PRESET, "per_device_batch": 4, "gpu": "A100-80GB"}
    _wait_for(browser, "a", body_a)
    api_a = httpx.post(server + "/v1/estimate", json=body_a, timeout=30).json()
    assert api_a["model"]["name"] == PRESET and api_a["gpu"]["name"] == "A100-SXM-80GB"
    assert api_a["job"]["training"]["micro_batch_size"] == 4
    _check_equal(_dom_answer(browser, "a"), api_a)

    # configuration B beside it: a copy of A, sharded over 8 GPUs with ZeRO-3
    browser.find_element(By.CSS_SELECTOR, "#slot-a .copy-other").click()
    _set(browser, "b", "zero", "3")
    _set(browser, "b", "gpus_per_node", "8")
    body_b = dict(body_a, zero=3, gpus_per_node=8)
    _wait_for(browser, "b", body_b)
    api_b = httpx.post(server + "/v1/estimate", json=body_b, timeout=30).json()
    _check_equal(_dom_answer(browser, "b"), api_b)
    assert api_b["memory"]["total_bytes"] < api_a["memory"]["total_bytes"]  # ZeRO-3 shards
    _check_equal(_dom_answer(browser, "a"), api_a)  # A unchanged beside it

    # values on hover: the tooltip names the component and its GiB
    from selenium.webdriver.common.action_chains import ActionChains

    segment = browser.find_element(By.CSS_SELECTOR,
                                   "#slot-a .chart rect.seg[data-component='activations']")
    ActionChains(browser).move_to_element(segment).perform()
    tooltip = browser.find_element(By.ID, "tooltip")
    WebDriverWait(browser, 5).until(lambda d: tooltip.is_displayed())
    gib = api_a["memory"]["components"]["activations"] / 1024**3
    assert tooltip.text.startswith("activations") and f"{gib:.2f} GiB" in tooltip.text

    shot = tmp_path / "serve.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 20_000

    # the state is in the URL: opening it again shows the same two answers
    url = browser.current_url
    query = parse_qs(urlparse(url).query)
    assert query["a.per_device_batch"] == ["4"] and query["b.zero"] == ["3"]
    browser.get(url)
    _wait_for(browser, "a", body_a)
    _wait_for(browser, "b", body_b)
    _check_equal(_dom_answer(browser, "a"), api_a)
    _check_equal(_dom_answer(browser, "b"), api_b)


def test_page_shows_the_field_of_a_bad_value(server, browser):
    """The error sits beside its input (the job path parallelism.tp maps back to --tp), names
    the input, lists the accepted values once, and the last good answer stays."""
    browser.get(server + "/?a.model=" + PRESET)
    _wait_for(browser, "a", {"model": PRESET})
    _set(browser, "a", "tp", "3")
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(
        By.CSS_SELECTOR, "#slot-a .results[data-state='error']"))
    error = browser.find_element(By.CSS_SELECTOR, "#slot-a .results .error")
    assert error.get_attribute("data-field") == "parallelism.tp"
    assert error.get_attribute("data-input") == "tp"
    assert "(--tp)" in error.text and "parallelism.tp" not in error.text
    label = browser.find_element(By.CSS_SELECTOR, "#slot-a form.knobs label.invalid")
    assert label.find_element(By.CSS_SELECTOR, "[data-field]").get_attribute("data-field") == "tp"
    assert label.find_element(By.CSS_SELECTOR, "[data-field]").get_attribute("aria-invalid") == "true"
    beside = label.find_element(By.CSS_SELECTOR, ".field-error")
    assert beside.is_displayed() and "accepted: 1, 2, 4, 8" in beside.text
    slot_text = browser.find_element(By.ID, "slot-a").text
    assert slot_text.count("accepted:") == 1
    # the last good answer is kept (greyed) under the error
    kept = browser.find_element(By.CSS_SELECTOR, "#slot-a .results .answer.stale .verdict")
    assert kept.is_displayed()
    # fixing the value clears the mark
    _set(browser, "a", "tp", "")
    _wait_for(browser, "a", {"model": PRESET})
    assert not browser.find_elements(By.CSS_SELECTOR, "#slot-a label.invalid, #slot-a .field-error")


def _assumed(driver, slot: str) -> dict:
    rows = driver.find_elements(By.CSS_SELECTOR, f"#slot-{slot} details.assumed > table tbody tr")
    return {r.get_attribute("data-path"): (r.get_attribute("data-value"),
                                           r.get_attribute("data-origin")) for r in rows}


def test_assumed_panel_explain_and_intervals(server, browser):
    body = {"model": PRESET, "per_device_batch": 4, "gpu": "A100-80GB", "explain": True}
    browser.get(f"{server}/?a.model={PRESET}&a.per_device_batch=4&a.gpu=A100-80GB&a.explain=true")
    _wait_for(browser, "a", body)
    api = httpx.post(server + "/v1/estimate", json=body, timeout=30).json()
    assumed = _assumed(browser, "a")
    job = api["job"]
    assert assumed["training.seq_len"] == (f"{job['training']['seq_len']:,}", "default")
    assert assumed["training.micro_batch_size"] == (f"{job['training']['micro_batch_size']:,}",
                                                    "--per-device-batch")
    assert assumed["training.precision"][0] == job["training"]["precision"]
    assert assumed["training.dtype"][0] == job["training"]["dtype"]
    assert assumed["hardware.gpu"] == (job["hardware"]["gpu"], "--gpu")
    assert {"training.stack", "layout", "parallelism.zero_stage"} <= set(assumed)
    stack = browser.find_element(By.CSS_SELECTOR,
                                 "#slot-a details.assumed tr[data-path='training.stack'] td")
    assert "pytorch" in stack.text  # the resolved stack, not "null"
    # the verdict's probability, the P10-P90 of the peak and of the step time
    mem = api["memory"]
    verdict = browser.find_element(By.CSS_SELECTOR, "#slot-a .verdict")
    assert verdict.get_attribute("data-verdict") == mem["verdict"]
    assert float(verdict.get_attribute("data-fits-probability")) == mem["fits_probability"]
    whisker = browser.find_element(By.CSS_SELECTOR, "#slot-a .chart g.interval")
    assert [float(whisker.get_attribute(a)) for a in ("data-p10", "data-p90")] == \
        mem["provenance"]["interval"]
    ranges = browser.find_elements(By.CSS_SELECTOR, "#slot-a dd[data-metric] .range")
    assert [float(r.get_attribute("data-p90")) for r in ranges] == [
        mem["provenance"]["interval"][1], api["time"]["provenance"]["interval"][1]]
    host = browser.find_element(By.CSS_SELECTOR, "#slot-a dd[data-metric='host_bytes']")
    assert int(host.get_attribute("data-value")) == mem["host_bytes"]
    fewest = browser.find_element(By.CSS_SELECTOR, "#slot-a dd[data-metric='min_gpus']")
    assert mem["min_gpus_reason"] in fewest.text
    # explain on: every quantity's rule and candidates
    explain = browser.find_element(By.CSS_SELECTOR, "#slot-a details.explain")
    quantities = [q.get_attribute("data-quantity")
                  for q in explain.find_elements(By.CSS_SELECTOR, "section[data-quantity]")]
    assert quantities == list(api["decisions"])
    assert api["decisions"]["memory"]["rule"] in explain.text
    # explain off: no such panel
    browser.get(f"{server}/?a.model={PRESET}")
    _wait_for(browser, "a", {"model": PRESET})
    assert not browser.find_elements(By.CSS_SELECTOR, "#slot-a details.explain")
    # the assumed value is the input's placeholder
    seq = browser.find_element(By.CSS_SELECTOR, "#slot-a [data-field='seq_len']")
    assert seq.get_attribute("placeholder") == str(job["training"]["seq_len"])
    label = seq.find_element(By.XPATH, "..")
    assert "Sequence length (tokens)" in label.text
    assert label.get_attribute("title").startswith("--seq-len")


# fetch held back until the test lets it go (or aborted through its signal)
_SLOW_FETCH = """
window.__fetch = window.__fetch || window.fetch;
window.__release = [];
window.fetch = (url, opts) => new Promise((resolve, reject) => {
  const go = () => resolve(window.__fetch(url, opts));
  window.__release.push(go);
  if (opts && opts.signal) opts.signal.addEventListener("abort",
    () => reject(new DOMException("aborted", "AbortError")));
});
"""


def test_loading_state_cancel_and_timeout(server, browser):
    browser.get(f"{server}/?a.model={PRESET}")
    _wait_for(browser, "a", {"model": PRESET})
    browser.execute_script(_SLOW_FETCH)
    _set(browser, "a", "per_device_batch", "2")
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(
        By.CSS_SELECTOR, "#slot-a .results[data-state='loading'] .loading"))
    loading = browser.find_element(By.CSS_SELECTOR, "#slot-a .loading")
    assert loading.is_displayed() and "estimating" in loading.text
    # the elapsed seconds count up; the old answer stays, greyed
    WebDriverWait(browser, 10).until(lambda d: float(d.find_element(
        By.CSS_SELECTOR, "#slot-a .loading .elapsed").text.split()[0]) >= 0.5)
    assert browser.find_element(By.CSS_SELECTOR, "#slot-a .answer.stale .verdict").is_displayed()
    # cancel: back to the last answer, said so
    loading.find_element(By.CSS_SELECTOR, "button.cancel").click()
    _wait_for(browser, "a", {"model": PRESET})
    assert "Cancelled" in browser.find_element(By.CSS_SELECTOR, "#slot-a .notice").text
    assert not browser.find_elements(By.CSS_SELECTOR, "#slot-a .answer.stale")
    # let the next one through: its answer replaces the old
    browser.execute_script("window.__release = []")
    _set(browser, "a", "per_device_batch", "3")
    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return window.__release.length"))
    browser.execute_script("window.__release.forEach((go) => go())")
    _wait_for(browser, "a", {"model": PRESET, "per_device_batch": 3})
    # a 504: the server stopped the work; the last answer is kept
    browser.execute_script("""
      window.fetch = (url, opts) => url === "/v1/estimate" ? Promise.resolve(new Response(
        JSON.stringify({error: {field: null, message: "over the time limit of 30 s",
                                accepted: []}}),
        {status: 504, headers: {"Content-Type": "application/json"}})) : window.__fetch(url, opts);
    """)
    _set(browser, "a", "per_device_batch", "5")
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(
        By.CSS_SELECTOR, "#slot-a .results[data-state='error'] .error[data-status='504']"))
    error = browser.find_element(By.CSS_SELECTOR, "#slot-a .results .error")
    assert "server stopped the work" in error.text and "time limit" in error.text
    assert browser.find_element(By.CSS_SELECTOR, "#slot-a .answer .verdict").is_displayed()
    browser.execute_script("window.fetch = window.__fetch")


def test_inference_layout(server, browser):
    body = {"model": PRESET, "mode": "inference", "gpu": "A100-80GB"}
    browser.get(f"{server}/?a.model={PRESET}&a.mode=inference&a.gpu=A100-80GB")
    _wait_for(browser, "a", body)
    api = httpx.post(server + "/v1/estimate", json=body, timeout=30).json()
    root = browser.find_element(By.ID, "slot-a")
    text = root.find_element(By.CSS_SELECTOR, ".results").text
    assert "largest micro-batch" not in text and "whole run" not in text
    metric = {m.get_attribute("data-metric"): m.get_attribute("data-value")
              for m in root.find_elements(By.CSS_SELECTOR, "dd[data-metric]")}
    inf = api["inference"]
    assert float(metric["time_to_first_token_seconds"]) == inf["time_to_first_token_seconds"]
    assert float(metric["usd"]) == inf["usd_per_million_tokens"]
    assert int(metric["kv_cache_bytes"]) == inf["kv_cache_bytes"]
    assert "per million generated tokens" in text
    verdict = root.find_element(By.CSS_SELECTOR, ".verdict")
    assert f"largest batch that fits at {inf['context']:,} tokens: {inf['max_batch']}" in verdict.text
    assumed = _assumed(browser, "a")
    assert assumed["inference.context"][0] == f"{inf['context']:,}"
    assert "training.seq_len" not in assumed
    assert root.find_element(By.CSS_SELECTOR, "details[data-group^='inference']") \
        .get_attribute("open") is not None


@pytest.mark.parametrize("width,height", [(390, 1500), (1280, 1500)])
def test_no_horizontal_overflow(server, browser, width, height, tmp_path):
    """At phone and laptop widths the page fits the viewport and the verdict is in view. The
    screenshot goes to the test's own folder; docs/img/page-390.png and page-1280.png
    (docs/serve.md) are these, copied there by hand when the page changes (a test run leaves
    the checkout as it was)."""
    query = (f"a.model={PRESET}&a.per_device_batch=4&a.gpu=A100-80GB"
             f"&b.model={PRESET}&b.mode=inference&b.gpu=A100-80GB")
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
    try:
        browser.get(f"{server}/?{query}")
        _wait_for(browser, "a", {"model": PRESET, "per_device_batch": 4, "gpu": "A100-80GB"})
        _wait_for(browser, "b", {"model": PRESET, "mode": "inference", "gpu": "A100-80GB"})
        inner, scroll = browser.execute_script(
            "return [window.innerWidth, document.documentElement.scrollWidth]")
        assert inner == width
        assert scroll <= inner
        for slot in "ab":
            rect = browser.execute_script(
                "const r = document.querySelector(arguments[0]).getBoundingClientRect();"
                "return [r.left, r.right, r.top]", f"#slot-{slot} .verdict")
            assert 0 <= rect[0] and rect[1] <= width
        assert browser.execute_script(
            "return document.querySelector('#slot-a .verdict').getBoundingClientRect().top"
        ) < height
        shot = tmp_path / f"page-{width}.png"
        assert browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 20_000
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.fixture(scope="module")
def plan_server():
    from fmest.serve.app import create_app
    from fmest.serve.local import serving

    pytest.importorskip("fmest.plan")
    from fmest import plan

    if not hasattr(plan, "plan_output"):
        pytest.skip("this fmest.plan has no plan_output")
    from fmest.engine import Engine

    engine = Engine()
    if "plan" not in engine.commands():  # until fmest plan is a default command
        import fmest.default_plugins.plan as plan_plugin

        engine.pm.register(plan_plugin, name="plan")
    with serving(create_app(engine)) as url:
        yield url


def test_plan_view_matches_the_api(plan_server, browser, tmp_path):
    query = (f"a.model={PRESET}&a.dataset_tokens=1e9&p.max_gpus=16&p.gpus=A100-80GB,H100"
             "&p.top=15&plan=a")
    browser.get(f"{plan_server}/?{query}")
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(
        By.CSS_SELECTOR, "#plan .plan-results[data-state='ok']"))
    box = browser.find_element(By.CSS_SELECTOR, "#plan .plan-results")
    body = json.loads(box.get_attribute("data-request"))
    assert body == {"model": PRESET, "dataset_tokens": 1e9, "max_gpus": 16,
                    "gpus": "A100-80GB,H100", "top": 15}
    api = httpx.post(plan_server + "/v1/plan", json=body, timeout=60).json()
    points = {int(c.get_attribute("data-rank")): (float(c.get_attribute("data-usd")),
                                                  c.get_attribute("data-pareto") == "true")
              for c in box.find_elements(By.CSS_SELECTOR, "circle.plan-point")}
    assert points == {p["rank"]: (p["usd"], p["pareto"]) for p in api["plans"]}
    assert any(pareto for _, pareto in points.values())
    rows = box.find_elements(By.CSS_SELECTOR, "table.plans tbody tr")
    assert len(rows) == len(api["plans"])
    browser.execute_script("document.getElementById('plan').scrollIntoView()")
    assert browser.save_screenshot(str(tmp_path / "plan.png"))


def test_local_config_upload(server, browser, tmp_path):
    """A local config.json is read in the browser and sent as the job's inline model_config."""
    preset = Path(__file__).resolve().parents[1] / "core" / "fmest" / "models" / "presets"
    config = dict(json.loads((preset / "qwen2.5-0.5b.json").read_text())["config"],
                  _name_or_path="my-org/my-small-qwen")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    browser.get(server + "/?a.gpu=L4")
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(
        By.CSS_SELECTOR, "#slot-a [data-field='gpu']"))
    browser.find_element(By.CSS_SELECTOR, "#slot-a input.config-file").send_keys(str(path))
    body = {"gpu": "L4", "model": "my-org/my-small-qwen", "model_config": config}
    _wait_for(browser, "a", body)
    api = httpx.post(server + "/v1/estimate", json=body, timeout=30).json()
    assert api["model"]["name"] == "my-org/my-small-qwen"
    assert "inline model_config" in api["model"]["source"]
    _check_equal(_dom_answer(browser, "a"), api)
    note = browser.find_element(By.CSS_SELECTOR, "#slot-a .upload-note")
    assert note.is_displayed() and "not in the link" in note.text
