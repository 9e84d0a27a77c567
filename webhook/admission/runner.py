"""Running the app: TLS sites, event loop choice, log flushing, signals and shutdown."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from collections.abc import Callable

from aiohttp import web

from webhook.admission.app import create_metrics_app
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


async def serve_app(
    app: web.Application,
    args: argparse.Namespace,
    reloader: CertReloader,
    log_handler: BatchedStreamHandler,
) -> None:
    flusher = asyncio.create_task(_flush_logs(log_handler))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Short grace: the API server's timeoutSeconds is a few seconds, so a review still running
    # after 10 s has already been given up on.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=10.0)
    await runner.setup()
    runners = [runner]
    try:
        await web.TCPSite(runner, args.host, args.port, ssl_context=reloader.context).start()
        if args.metrics_port:
            metrics_runner = web.AppRunner(create_metrics_app(app), access_log=None)
            await metrics_runner.setup()
            runners.append(metrics_runner)
            await web.TCPSite(metrics_runner, args.host, args.metrics_port).start()
        state = app[STATE]
        log.info(
            "serving admission reviews on https://%s:%d (json=%s, loop=%s, metrics port %s)",
            args.host,
            args.port,
            state.codec.name,
            type(loop).__module__.split(".")[0],
            args.metrics_port or "off",
        )
        await stop.wait()
        log.info("shutting down: finishing reviews in flight")
        state.shutting_down = True
    finally:
        for each in reversed(runners):
            await each.cleanup()
        flusher.cancel()
        log_handler.flush()
