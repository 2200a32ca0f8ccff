"""``fmest probe``'s progress and the traced estimate's spinner (issue 26): one ETA, by the
display's rule (fmest.output.render.eta_seconds), and the elapsed seconds on the spinner."""

from __future__ import annotations

import io
import re
import time

from fmest.output import render
from fmest_torch_runner.probe import _Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_probe_log_lines_carry_one_eta(monkeypatch):
    clock = iter([100.0, 110.0, 130.0, 160.0])
    monkeypatch.setattr(render.time, "monotonic", lambda: next(clock))
    log = io.StringIO()
    progress = _Progress(3, 2, stream=log)
    progress.update("ok")
    progress.update("error")
    progress.update("ok")
    lines = log.getvalue().splitlines()
    assert lines == ["probing (2 already done): 1/3 ok=1 (elapsed 10 s, ETA 20 s)",
                     "probing (2 already done): 2/3 error=1 ok=1 (elapsed 30 s, ETA 15 s)",
                     "probing (2 already done): 3/3 error=1 ok=2 (elapsed 60 s, ETA 0 s)"]
    assert all(line.lower().count("eta") == 1 for line in lines)


def test_probe_bar_shows_one_eta():
    term = _Terminal()
    progress = _Progress(2, 0, stream=term)
    progress.update("ok")
    progress.update("ok")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", term.getvalue())
    last = [ln for ln in re.split(r"[\r\n]", text) if "2/2" in ln][-1]
    assert last.lower().count("eta") == 1 and "remaining" not in last.lower()
    assert re.search(r"ok=2 \d+ s ETA \d+ s", last), last


def test_spinner_shows_elapsed_seconds():
    term = _Terminal()
    with render.status("tracing gpt2 (2 steps on fake tensors)", stream=term):
        time.sleep(1.2)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", term.getvalue())
    assert re.search(r"tracing gpt2 \(2 steps on fake tensors\) 1 s", text), text[-300:]


def test_eta_rule():
    assert render.eta_seconds(10.0, 0, 5) is None
    assert render.eta_seconds(10.0, 2, 5) == 15.0
    assert render.clock(42.4) == "42 s" and render.clock(300) == "5.0 min"
