"""uvicorn's h11 protocol with a deadline for the request head (``fmest serve --header-timeout``).

uvicorn closes a keep-alive connection that stays idle ``--timeout-keep-alive`` seconds after an
answer, but any byte restarts that wait, and a connection that never sent a request has no timer
at all: a client that sends nothing, or a byte now and then, holds its connection (and a slot of
``--limit-concurrency``) for as long as it likes. :func:`http_protocol` returns a subclass of
uvicorn's ``H11Protocol`` that starts a timer when a connection opens and again when an answer
is complete (keep-alive), and stops it when a whole request head (h11's ``Request`` event)
has arrived. When the timer fires the connection is closed: silently when nothing of a next
request has arrived (as uvicorn's own keep-alive timeout does), after a ``408`` with the
service's JSON error when part of a head has (nginx's ``client_header_timeout``). The body has
its own deadline, in :func:`fmest.serve.app.create_app` (``--body-timeout``).

The subclass hooks ``connection_made``, ``handle_events``, ``on_response_complete`` and
``connection_lost`` and reads the attributes ``conn`` (the ``h11.Connection``), ``transport``,
``loop`` and ``scope`` (set anew for each request head) of uvicorn's ``H11Protocol`` (0.29 to
0.54 at least). When an installed uvicorn lacks them, :func:`http_protocol` logs a warning and
returns ``"h11"``: the service then runs with plain h11 and no head deadline.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Optional, Union

from fmest.errors import error_body

log = logging.getLogger("fmest.serve")

#: Default ``--header-timeout``: a request head is a few hundred bytes; 10 s is generous for a
#: slow mobile link and short enough that 1,000 connections sending nothing are gone in 10 s.
DEFAULT_HEADER_TIMEOUT_SECONDS = 10.0

#: The methods of uvicorn's ``H11Protocol`` the subclass extends, and the attributes it reads.
HOOKED_METHODS = ("connection_made", "handle_events", "on_response_complete", "connection_lost")
READ_ATTRIBUTES = ("conn", "transport", "loop", "scope")


def timeout_answer(header_timeout: float) -> bytes:
    """The whole ``408`` written to a connection whose request head did not arrive in time
    (written by hand: h11 answers only a request it has parsed)."""
    body = json.dumps(error_body("head", f"the request head did not arrive within the "
                                 f"server's limit of {header_timeout:g} s (fmest serve "
                                 "--header-timeout)")).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode()
            + b"\r\n\r\n" + body)


def http_protocol(header_timeout: float = DEFAULT_HEADER_TIMEOUT_SECONDS
                  ) -> Union[type[asyncio.Protocol], str]:
    """The ``http`` argument of ``uvicorn.run``: uvicorn's h11 protocol closing a connection
    whose request head has not arrived ``header_timeout`` seconds after it opened or after its
    last answer; ``"h11"`` (with a logged warning) when the installed uvicorn's protocol does
    not have what the subclass hooks."""
    try:  # the serve extra's; importing fmest.serve imports this module, not them
        import h11
        from uvicorn.protocols.http.h11_impl import H11Protocol
    except ImportError as exc:  # pragma: no cover - uvicorn moved its protocol
        log.warning("fmest serve: uvicorn's h11 protocol is not where it was (%s); serving "
                    "without a request-head deadline (--header-timeout)", exc)
        return "h11"
    missing = [name for name in HOOKED_METHODS if not callable(getattr(H11Protocol, name, None))]
    if missing:
        log.warning("fmest serve: uvicorn's H11Protocol has no %s; serving without a "
                    "request-head deadline (--header-timeout)", ", ".join(missing))
        return "h11"

    class HeadDeadlineProtocol(H11Protocol):  # type: ignore[misc, valid-type]
        """uvicorn's ``H11Protocol`` with the request-head deadline of
        :func:`http_protocol`."""

        header_timeout_seconds = header_timeout
        answer_on_timeout = timeout_answer(header_timeout)
        #: False on an instance whose uvicorn lacks an attribute the deadline reads (warned
        #: once per process); that connection is served as plain h11
        _warned = False

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_timer: Optional[asyncio.TimerHandle] = None
            self._deadline_on = (all(hasattr(self, name) for name in READ_ATTRIBUTES)
                                 and isinstance(self.conn, h11.Connection))
            if not self._deadline_on and not HeadDeadlineProtocol._warned:
                HeadDeadlineProtocol._warned = True
                log.warning("fmest serve: uvicorn's H11Protocol lacks one of %s; serving "
                            "without a request-head deadline (--header-timeout)",
                            ", ".join(READ_ATTRIBUTES))

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._start_head_timer()

        def handle_events(self) -> None:
            scope = getattr(self, "scope", None)
            super().handle_events()
            if getattr(self, "scope", None) is not scope:  # a request head arrived
                self._stop_head_timer()

        def on_response_complete(self) -> None:
            # before uvicorn's: it handles a pipelined request that is already here, and
            # handle_events then stops this timer
            if self._deadline_on and not self.transport.is_closing():
                self._start_head_timer()
            super().on_response_complete()

        def connection_lost(self, exc: Optional[Exception]) -> None:
            self._stop_head_timer()
            super().connection_lost(exc)

        def _start_head_timer(self) -> None:
            if not self._deadline_on:
                return
            self._stop_head_timer()
            self._head_timer = self.loop.call_later(self.header_timeout_seconds,
                                                    self._head_timed_out)

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            transport = self.transport
            if transport is None or transport.is_closing():
                return
            conn = self.conn
            started = bool(conn.trailing_data[0])  # bytes of a head not yet parsed
            waiting = conn.our_state is h11.IDLE and conn.their_state is h11.IDLE
            log.debug("fmest serve: closing %s: no request head within %g s%s", self.client,
                      self.header_timeout_seconds, " (408)" if started and waiting else "")
            if started and waiting:
                transport.write(self.answer_on_timeout)
            try:
                conn.send(h11.ConnectionClosed())
            except h11.LocalProtocolError:
                pass
            transport.close()

    return HeadDeadlineProtocol
