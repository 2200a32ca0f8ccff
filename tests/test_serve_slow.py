"""Slow and idle clients against a real uvicorn server (``fmest.serve.protocol``, the body
deadline of ``fmest.serve.app``): 300 connections that send nothing or drip a request head a
byte at a time do not keep ``/healthz`` or an estimate from answering, and the server closes
them at the head deadline; a body that drips gets 408. benchmarks/serve_slow.py does the same
with 1,000 connections."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from fmest import cli  # noqa: E402
from fmest.serve import DEFAULT_LIMIT_CONCURRENCY, SPARE_FILES, raise_open_files_limit  # noqa: E402
from fmest.serve.app import create_app  # noqa: E402
from fmest.serve.protocol import http_protocol  # noqa: E402

#: short deadlines, but long enough that /healthz and an estimate are answered well before the
#: slow connections are closed on a loaded 2-CPU machine (0.1 s when it is idle)
HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 1.0
#: how late past its deadline the server may close a connection on a loaded 2-CPU machine
SLACK = 3.0
SLOW = 300
BODY = {"model": "meta-llama/Llama-2-7b-hf", "gpu": "A100-80GB", "per_device_batch": 2}
HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


@contextmanager
def running_server(header_timeout: float = HEADER_TIMEOUT, **app_kwargs) -> Iterator[tuple[int, uvicorn.Server]]:
    """fmest's app under uvicorn with the head deadline, in a thread, on a free port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(create_app(**app_kwargs), log_level="warning", log_config=None,
                            http=http_protocol(header_timeout),
                            limit_concurrency=DEFAULT_LIMIT_CONCURRENCY, timeout_keep_alive=5)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        yield sock.getsockname()[1], server
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def request(port: int, raw: bytes, timeout: float = 30) -> tuple[int, bytes]:
    """Send ``raw`` on a new connection and read the answer until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def read_answer(sock: socket.socket) -> bytes:
    """One whole answer (head and ``Content-Length`` body) from a keep-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head = data.partition(b"\r\n\r\n")[0].lower()
    length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
    while len(data) < len(head) + 4 + length:
        data += sock.recv(65536)
    return data


def get(port: int, path: str) -> tuple[int, bytes]:
    return request(port, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                   .encode())


def post(port: int, path: str, body: dict) -> tuple[int, bytes]:
    data = json.dumps(body).encode()
    return request(port, f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
                   .encode() + data)


def test_slow_connections_do_not_starve_others_and_are_closed_at_the_deadline():
    limit = raise_open_files_limit(2 * SLOW + SPARE_FILES)
    if limit is not None and limit < 2 * SLOW + SPARE_FILES:
        pytest.skip(f"the open-file limit ({limit}) is too low for {SLOW} connections")
    with running_server() as (port, server):
        assert post(port, "/v1/estimate", BODY)[0] == 200  # the engine warm
        # keep-alive: 10 connections ask once and then drip the next head
        started: dict[socket.socket, float] = {}
        keep_alive = []
        for _ in range(10):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert read_answer(sock).startswith(b"HTTP/1.1 200")
            started[sock] = time.monotonic()
            keep_alive.append(sock)
        opened = time.monotonic()
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(SLOW // 2)]
        drip = [socket.create_connection(("127.0.0.1", port))
                for _ in range(SLOW // 2 - len(keep_alive))] + keep_alive
        for sock in silent + drip:
            started.setdefault(sock, opened)
        for sock in silent + drip:
            sock.setblocking(False)
        stop = threading.Event()

        def dripping() -> None:
            sent = 0
            while not stop.is_set():
                for sock in drip:
                    try:
                        sock.send(HEAD[sent:sent + 1] or b"x")
                    except OSError:
                        pass
                sent += 1
                stop.wait(0.1)

        dripper = threading.Thread(target=dripping, daemon=True)
        dripper.start()
        try:
            while len(server.server_state.connections) < SLOW:
                assert time.monotonic() - opened < HEADER_TIMEOUT, "connections not accepted"
                time.sleep(0.01)
            # (a) answered while the slow connections are open
            assert get(port, "/healthz")[0] == 200
            status, body = post(port, "/v1/estimate", BODY)
            assert status == 200, body
            answered = time.monotonic() - opened
            still_open = len(server.server_state.connections)
            # (b) each closed by the server within the deadline and the slack, not before;
            # a drip that began a head gets the 408, one that sent nothing is just closed
            closed: dict[socket.socket, float] = {}
            answers: dict[socket.socket, bytes] = {}
            while len(closed) < SLOW and time.monotonic() - opened < HEADER_TIMEOUT + SLACK:
                for sock in silent + drip:
                    if sock in closed:
                        continue
                    try:
                        data = sock.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:  # reset: the server closed with bytes unread
                        data = b""
                    if data:
                        answers[sock] = answers.get(sock, b"") + data
                    else:
                        closed[sock] = time.monotonic() - started[sock]
                time.sleep(0.02)
        finally:
            stop.set()
            dripper.join()
            for sock in silent + drip:
                sock.close()
        assert still_open >= SLOW, (answered, still_open)  # (a) happened while they were open
        assert len(closed) == SLOW, f"{SLOW - len(closed)} slow connections still open"
        assert HEADER_TIMEOUT - 0.05 <= min(closed.values()), min(closed.values())
        assert max(closed.values()) <= HEADER_TIMEOUT + SLACK, max(closed.values())
        print(f"answered after {answered:.2f} s; closed after {min(closed.values()):.2f} to "
              f"{max(closed.values()):.2f} s")
        assert all(sock not in answers for sock in silent)
        for sock in drip:
            assert answers[sock].startswith(b"HTTP/1.1 408 "), answers[sock][:200]
            error = json.loads(answers[sock].partition(b"\r\n\r\n")[2])["error"]
            assert error["field"] == "head" and "--header-timeout" in error["message"]
        # the server is still serving
        assert get(port, "/healthz")[0] == 200


def test_a_body_that_does_not_arrive_in_time_is_408_and_pipelining_works():
    with running_server(body_timeout_seconds=BODY_TIMEOUT) as (port, _server):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST /v1/estimate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 100\r\n\r\n{")
            t0 = time.monotonic()
            data = b""
            sock.settimeout(0.2)
            while time.monotonic() - t0 < BODY_TIMEOUT + SLACK:
                try:
                    chunk = sock.recv(65536)
                except socket.timeout:
                    sock.sendall(b" ")  # a byte now and then
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                data += chunk
            took = time.monotonic() - t0
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 "), data[:300]
        assert b"connection: close" in head.lower()
        error = json.loads(body)["error"]
        assert error["field"] == "body" and "--body-timeout" in error["message"]
        assert BODY_TIMEOUT - 0.05 <= took <= BODY_TIMEOUT + SLACK
        # two requests in one write: both answered, the deadline stopped by the second head
        one = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        status, rest = request(port, one + one.replace(b"\r\n\r\n", b"\r\nConnection: close"
                                                       b"\r\n\r\n"))
        assert status == 200 and rest.count(b"HTTP/1.1 200") == 1


def test_fmest_serve_passes_the_deadlines(monkeypatch):
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from fmest.serve import app as app_module

    made: list = []
    create_app_ = app_module.create_app
    monkeypatch.setattr(app_module, "create_app",
                        lambda *a, **kw: made.append(kw) or create_app_(*a, **kw))
    calls: list = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append(kw))
    assert cli.main(["serve", "--header-timeout", "3", "--body-timeout", "4.5",
                     "--workers", "0"]) == 0
    assert cli.main(["serve", "--workers", "0"]) == 0
    (given, default), (made_given, made_default) = calls, made
    assert issubclass(given["http"], H11Protocol)
    assert given["http"].header_timeout_seconds == 3
    assert default["http"].header_timeout_seconds == 10
    assert default["limit_concurrency"] == DEFAULT_LIMIT_CONCURRENCY == 2048
    assert (made_given["body_timeout_seconds"], made_default["body_timeout_seconds"]) == (4.5, 30)
    for argv in (["--header-timeout", "0"], ["--body-timeout", "-1"],
                 ["--header-timeout", "nan"]):
        with pytest.raises(SystemExit):
            cli.main(["serve", *argv])


def test_a_different_uvicorn_falls_back_to_plain_h11(monkeypatch, caplog):
    from uvicorn.protocols.http.h11_impl import H11Protocol

    monkeypatch.delattr(H11Protocol, "on_response_complete")
    with caplog.at_level(logging.WARNING, logger="fmest.serve"):
        assert http_protocol(1.0) == "h11"
    assert "on_response_complete" in caplog.text and "--header-timeout" in caplog.text
