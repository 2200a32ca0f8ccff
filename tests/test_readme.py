"""Every command the README shows runs as shown and answers with exit code 0 (issue 26).

The commands are read from the README's shell code blocks (``\\`` continuations joined, ``&&``
chains split, comments dropped) and run in order in a scratch folder that links the repository's
top-level folders (``examples/``, ``tests/``, ``plugins/``, ...), so that what they write
(``probes.csv``, ``my_bundle/``, ``breakdown.png``) stays out of the checkout and later commands
read what earlier ones wrote, as a reader's would. ``fmest ...`` runs in-process through
:func:`fmest.cli.main` with a time limit; anything else in a subprocess. Skipped, each with its
reason: the install commands (``pip install``: CI's ``.ci/run`` installs), the test command
itself, anything naming a GPU device; ``fmest serve`` is started for real on a free port and must
answer ``/healthz``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The most one README command may take (the slowest, a CPU probe sweep, takes ~15 s here).
TIMEOUT_S = 180


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"^```(?:bash|sh|shell|console)[ \t]*\n(.*?)^```", text, re.S | re.M)


def readme_commands(text: str | None = None) -> list[str]:
    """Each command line of the README's shell blocks, in order: continuation lines joined,
    blank and comment lines dropped, ``a && b`` split into ``a`` and ``b``."""
    out: list[str] = []
    for block in shell_blocks(README.read_text() if text is None else text):
        pending = ""
        for line in block.splitlines():
            line = line.rstrip()
            if line.endswith("\\"):
                pending += line[:-1].strip() + " "
                continue
            command = (pending + line.strip()).strip()
            pending = ""
            if command and not command.startswith("#"):
                out += [part.strip() for part in command.split("&&")]
    return out


def skip_reason(argv: list[str]) -> str | None:
    if argv[0] == "pip" or argv[:3] == ["python", "-m", "pip"]:
        return "installs packages (CI's .ci/run installs the developer set)"
    if argv[:3] == ["python", "-m", "pytest"]:
        return "the test suite itself (CI runs it)"
    if any(a in ("cuda", "--device=cuda") or a.startswith("cuda:") for a in argv):
        return "needs a GPU"
    if any(a.startswith(("http://", "https://")) for a in argv):
        return "needs the network"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_fmest(argv: list[str]) -> tuple[int, str, str]:
    """``fmest argv`` in-process (exit code, stdout, stderr), failing past :data:`TIMEOUT_S`."""
    from fmest.cli import main

    out, err, box = io.StringIO(), io.StringIO(), {}

    def work():
        try:
            box["rc"] = main(argv)
        except SystemExit as exc:   # argparse's --help / refusals
            box["rc"] = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # noqa: BLE001 - reported as the command's failure
            box["rc"], box["exc"] = 1, exc

    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        worker.join(TIMEOUT_S)
    if worker.is_alive():
        pytest.fail(f"fmest {shlex.join(argv)} ran past {TIMEOUT_S} s")
    if "exc" in box:
        err.write(f"{type(box['exc']).__name__}: {box['exc']}")
    return box["rc"], out.getvalue(), err.getvalue()


def run_serve(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """``fmest serve`` started for real (on a free port instead of the one shown, which may be
    taken): it must answer ``/healthz`` within 60 s; then it is stopped."""
    pytest.importorskip("fastapi", reason="fmest serve needs fmest[serve]")
    pytest.importorskip("uvicorn", reason="fmest serve needs fmest[serve]")
    argv = list(argv)
    port = _free_port()
    if "--port" in argv:
        argv[argv.index("--port") + 1] = str(port)
    else:
        argv += ["--port", str(port)]
    proc = subprocess.Popen([sys.executable, "-m", "fmest", *argv[1:]], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz",
                                            timeout=5) as resp:
                    return (0 if resp.status == 200 else 1), resp.read().decode(), ""
            except OSError:
                time.sleep(0.2)
        return 1, "", f"no answer on /healthz (exit {proc.poll()})"
    finally:
        proc.terminate()
        try:
            out = proc.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0]
        if proc.returncode not in (0, -15):
            print(out)


@pytest.fixture()
def scratch(tmp_path, monkeypatch) -> Path:
    """A folder where the README's relative paths resolve (links to the repository's
    top-level entries) and what the commands write stays; caches there too, offline."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in ROOT.iterdir():
        if not entry.name.startswith("."):
            (work / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    monkeypatch.chdir(work)
    monkeypatch.setenv("FMEST_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return work


def test_readme_commands_are_found():
    commands = readme_commands()
    assert "python -m pytest -q" in commands          # the set-up's test command
    assert commands[0].startswith("pip install")      # the set-up's install-and-run command
    assert sum(c.startswith("fmest ") for c in commands) >= 20
    assert not any("..." in c for c in commands), "a command with '...' cannot run as shown"


def test_readme_command_extraction():
    text = "```bash\n# a comment\nfmest a \\\n    --b 1  # note\npip x && fmest c\n```\n" \
           "```python\nfmest.d()\n```\n"
    assert readme_commands(text) == ["fmest a --b 1  # note", "pip x", "fmest c"]


def test_every_readme_command_runs_as_shown(scratch, capsys):
    failures, skipped, timings = [], [], []
    for command in readme_commands():
        argv = shlex.split(command, comments=True)
        reason = skip_reason(argv)
        if reason:
            skipped.append(f"{command}  [{reason}]")
            continue
        started = time.perf_counter()
        if argv[:2] == ["fmest", "serve"]:
            rc, out, err = run_serve(argv, scratch)
        elif argv[0] == "fmest":
            rc, out, err = run_fmest(argv[1:])
        else:
            proc = subprocess.run(command, shell=True, cwd=scratch, capture_output=True,
                                  text=True, timeout=TIMEOUT_S)
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        timings.append((time.perf_counter() - started, command))
        if rc != 0:
            failures.append(f"exit {rc}: {command}\n{(err or out)[-2000:]}")
    with capsys.disabled():
        slow = ", ".join(f"{c.split(' --')[0]} ... {t:.1f} s" for t, c in
                         sorted(timings, reverse=True)[:3])
        print(f"\nREADME: ran {len(timings)} commands, skipped {len(skipped)}; slowest: {slow}")
        for line in skipped:
            print(f"  skipped: {line}")
    assert not failures, "\n\n".join(failures)


def test_readme_python_example_runs(scratch, capsys):
    blocks = re.findall(r"^```python[ \t]*\n(.*?)^```", README.read_text(), re.S | re.M)
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})   # noqa: S102
    assert capsys.readouterr().out


def test_readme_example_files_exist():
    """The files the examples name are shipped (examples/, tests/data/, presets)."""
    for command in readme_commands():
        for arg in shlex.split(command, comments=True):
            value = arg.split("=", 1)[-1]
            if value.startswith(("examples/", "tests/", "plugins/")):
                assert (ROOT / value).exists(), f"{value} (in: {command})"


def test_readme_shell_blocks_have_no_prompts():
    for block in shell_blocks(README.read_text()):
        assert not re.search(r"^\s*\$ ", block, re.M), "a '$ ' prompt cannot be pasted as is"


if os.name == "nt":   # pragma: no cover - symlinks need privileges there
    pytestmark = pytest.mark.skip(reason="the scratch folder links the repository (POSIX)")
