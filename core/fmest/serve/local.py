"""Running the service inside this process (tests, the load benchmark)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator


@contextlib.contextmanager
def serving(app, *, host: str = "127.0.0.1", port: int = 0,
            start_timeout_seconds: float = 30.0) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a background thread; yields the base URL
    (``port=0`` takes a free port) and stops the server on exit."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           backlog=512))
    thread = threading.Thread(target=server.run, name="fmest-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_seconds
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"fmest serve did not start on {host}:{port}")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
