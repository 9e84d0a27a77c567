"""Running the app: TLS sites, event loop choice, log flushing, signals and shutdown."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import signal
import time
from collections.abc import Callable

from aiohttp import web

from webhook.admission.app import create_metrics_app
from webhook.admission.limits import CLOSE_SECONDS, SHUTDOWN_GRACE_SECONDS, TLS_HANDSHAKE_TIMEOUT
from webhook.admission.logs import BatchedStreamHandler
from webhook.admission.state import STATE, WebhookState
from webhook.tls.certs import CertReloader

log = logging.getLogger(__name__)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    if os.environ.get("GPU_WEBHOOK_DISABLE_UVLOOP"):
        return None
    try:
        import uvloop  # noqa: PLC0415 - optional dependency (the `fast` extra)
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


async def _flush_logs(handler: BatchedStreamHandler) -> None:
    while True:
        await asyncio.sleep(handler.interval)
        handler.flush()


class _Refused(asyncio.Protocol):
    """A connection over the cap: closed as soon as it is made, nothing read or kept."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class _CappedFactory:
    """The admission listener's protocol factory, refusing connections past `limit`.

    aiohttp counts a connection once its TLS handshake is done (RequestHandler.connection_made);
    the ones still in their handshake are bounded by TLS_HANDSHAKE_TIMEOUT instead.
    """

    def __init__(self, server: web.Server, limit: int) -> None:
        self.server = server
        self.limit = limit
        self.refused = 0
        self._last_warning = -math.inf

    def __call__(self) -> asyncio.BaseProtocol:
        if len(self.server.connections) < self.limit:
            return self.server()
        self.refused += 1
        now = time.monotonic()
        if now - self._last_warning >= 10:  # one line per 10 s, not one per refused client
            self._last_warning = now
            log.warning(
                "refusing connections: %d are open (--max-connections); %d refused so far",
                self.limit,
                self.refused,
            )
        return _Refused()


def _runner(app: web.Application) -> web.AppRunner:
    # The per-connection deadlines are the app's handler_args (webhook.admission.body). The
    # reviews in flight were waited for already (_finish_reviews): the runner's own shutdown
    # only closes the connections once their answers are written.
    return web.AppRunner(app, access_log=None, shutdown_timeout=CLOSE_SECONDS)


async def _finish_reviews(state: WebhookState, seconds: float) -> None:
    """Wait until no review handler runs, at most `seconds` (the listener is closed already).

    aiohttp's shutdown (AppRunner.cleanup: Server.pre_shutdown, then RequestHandler.shutdown)
    closes every connection first, and a closed RequestHandler drops the bytes that still
    arrive (aiohttp 3.14 web_protocol.py data_received returns when _close is set): a review
    whose body was still on the wire would wait for its body deadline and get a 408. So the
    connections stay open until their reviews are answered; answers carry Connection: close.
    """
    deadline = time.monotonic() + seconds
    while state.in_flight and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    if state.in_flight:
        log.warning("%d reviews still in flight after %g s; closing them", state.in_flight, seconds)


async def _wait_for(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


async def serve_app(
    app: web.Application,
    args: argparse.Namespace,
    reloader: CertReloader,
    log_handler: BatchedStreamHandler,
) -> None:
    """Serve until SIGTERM/SIGINT, then drain (SPEC §7): readyz 503, Connection: close, exit."""
    flusher = asyncio.create_task(_flush_logs(log_handler))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = _runner(app)
    await runner.setup()
    runners = [runner]
    servers: list[asyncio.AbstractServer] = []
    state = app[STATE]
    try:
        # A listener of our own rather than web.TCPSite, which passes no ssl_handshake_timeout
        # (asyncio's default is 60 s); runner.cleanup() still closes its connections.
        assert runner.server is not None
        servers.append(
            await loop.create_server(
                _CappedFactory(runner.server, args.max_connections),
                args.host,
                args.port,
                ssl=reloader.context,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT,
            )
        )
        if args.metrics_port:
            metrics_runner = _runner(create_metrics_app(app))
            await metrics_runner.setup()
            runners.append(metrics_runner)
            await web.TCPSite(metrics_runner, args.host, args.metrics_port).start()
        log.info(
            "serving admission reviews on https://%s:%d (json=%s, loop=%s, metrics port %s)",
            args.host,
            args.port,
            state.codec.name,
            type(loop).__module__.split(".")[0],
            args.metrics_port or "off",
        )
        await stop.wait()
        state.shutting_down = True
        log.info(
            "shutting down: /readyz answers 503; still answering reviews (Connection: close) "
            "for the %g s drain delay",
            args.drain_seconds,
        )
        # A second signal ends the drain early (an impatient Ctrl-C).
        stop.clear()
        await _wait_for(stop, args.drain_seconds)
        log.info("drain over: no longer accepting connections; finishing reviews in flight")
        for server in servers:
            server.close()
        await _finish_reviews(state, SHUTDOWN_GRACE_SECONDS)
    finally:
        state.shutting_down = True
        for server in servers:
            server.close()
        for each in reversed(runners):
            await each.cleanup()
        flusher.cancel()
        log_handler.flush()
