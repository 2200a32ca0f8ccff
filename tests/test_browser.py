"""The page at ``/`` in a real browser (headless Chromium through selenium and chromedriver).

Pick a preset, change the micro-batch and the GPU, then read the chart's bytes, the verdict and
the step time from the DOM and check they equal ``POST /v1/estimate``'s answer for the same
job; copy to configuration B, change it, check B; reload the shared URL and check the state
comes back. A screenshot is saved under the test's tmp dir.
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
    assert ("DOES NOT FIT" in dom["verdict_text"]) == (not mem["fits"])
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
    browser.get(server + "/?a.model=" + PRESET + "&a.tp=3")
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(
        By.CSS_SELECTOR, "#slot-a .results[data-state='error']"))
    error = browser.find_element(By.CSS_SELECTOR, "#slot-a .results .error")
    assert error.get_attribute("data-field") == "parallelism.tp"
    assert "accepted: 1, 2, 4, 8" in error.text


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
