"""The app's lifetime: background tasks (policy source, audit, cert reload), shutdown drain."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from webhook.admission.state import STATE, PolicySource
from webhook.tls.certs import CertReloader

# The logger keeps the name it had when this was part of app.py: log lines and filters name it.
log = logging.getLogger("webhook.admission.app")


async def background(app: web.Application) -> AsyncIterator[None]:
    """Run the policy source and the certificate reload loop for the app's lifetime."""
    state = app[STATE]
    if state.policy_source is not None:
        state.background.append(asyncio.create_task(_guarded(state.policy_source)))
    for extra in state.tasks:
        state.background.append(asyncio.create_task(_guarded(extra, "a background task")))
    reloader = state.cert_reloader
    if reloader is not None and state.cert_reload_interval > 0:
        state.background.append(
            asyncio.create_task(_reload_certificates(reloader, state.cert_reload_interval))
        )
    yield
    state.shutting_down = True
    for task in state.background:
        task.cancel()
    for task in state.background:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    state.background.clear()
    if state.images is not None:
        await state.images.close()


async def _guarded(source: PolicySource, what: str = "the policy source") -> None:
    # A policy source (and the audit) is designed never to raise; if it does anyway, admission
    # keeps the last snapshot and the error is visible in logs and /readyz rather than killing
    # the process.
    try:
        await source()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("%s stopped; admission goes on with the last policies loaded", what)


async def _reload_certificates(reloader: CertReloader, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            reloader.check()
        except Exception:
            log.exception("certificate reload check failed; keeping the current certificate")


async def close_when_draining(request: web.Request, response: web.StreamResponse) -> None:
    # During the shutdown drain every answer says Connection: close, so the API server's
    # keep-alive connections move to other replicas before this one stops accepting (SPEC §7).
    # aiohttp (3.14) runs this hook after it computed the headers, so both are set here: the
    # header for the client, force_close() for the connection (closed after this answer).
    if request.app[STATE].shutting_down:
        response.force_close()
        response.headers["Connection"] = "close"
