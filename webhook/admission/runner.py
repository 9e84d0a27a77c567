"""Running the app: TLS sites, event loop choice, log flushing, signals and shutdown."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable

from aiohttp import web

from webhook.admission.app import create_metrics_app
from webhook.admission.limits import SHUTDOWN_GRACE_SECONDS, TLS_HANDSHAKE_TIMEOUT
from webhook.admission.logs import BatchedStreamHandler
from webhook.admission.state import STATE
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


def _runner(app: web.Application) -> web.AppRunner:
    # The per-connection deadlines are the app's handler_args (webhook.admission.body).
    return web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_SECONDS)


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
                runner.server,
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
    finally:
        state.shutting_down = True
        for server in servers:
            server.close()
        for each in reversed(runners):
            await each.cleanup()
        flusher.cancel()
        log_handler.flush()
