"""Reading a review body: content type, size, deadline and Content-Encoding, each with its reason.

aiohttp's own decompression is switched off (`auto_decompress=False` in HANDLER_ARGS): when a
compressed body ends badly, its parser raises from the end-of-message callback and the request's
payload never completes (aiohttp 3.14 http_parser.py DeflateBuffer.feed_eof), so the handler would
wait for its deadline and answer 408 instead of 400. Decoding here, with an output cap, also
makes a decompression bomb a 413 rather than memory.
"""

from __future__ import annotations

import asyncio
import logging
import zlib

from aiohttp import web

from webhook.admission.limits import BODY_TIMEOUT, HEADER_TIMEOUT, LINGER_SECONDS
from webhook.admission.metrics import Metrics

log = logging.getLogger(__name__)

# The API server caps one object at 3 MiB (etcd's default request limit, enforced by the
# apiserver as its max request body). An UPDATE review carries `object` and `oldObject` plus the
# envelope (userInfo, options, managedFields...), so a legitimate body can approach 6 MiB and JSON
# re-encoding may grow it a little; 7 MiB never refuses a real review but bounds memory per request.
MAX_BODY_BYTES = 7 * 1024 * 1024

# Passed to every aiohttp RequestHandler of the admission app (web.Application handler_args, so
# tests that start the app with a bare AppRunner get them too); see webhook.admission.limits.
HANDLER_ARGS = {
    "keepalive_timeout": HEADER_TIMEOUT,
    "lingering_time": LINGER_SECONDS,
    "auto_decompress": False,
}

# zlib window bits: gzip wrapper, zlib wrapper (RFC 1950, what HTTP "deflate" means) and raw
# deflate (RFC 1951, which some clients send as "deflate"; aiohttp and browsers accept both).
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}

TOO_LARGE = (
    f"request body is larger than {MAX_BODY_BYTES} bytes (limit sized for an UPDATE review "
    "of two 3 MiB objects); this is not an AdmissionReview from the API server"
)


def plain(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", content_type="text/plain")


class BodyError(Exception):
    """The body cannot be a review; `status` and the message are the answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def decode_content(body: bytes, encoding: str) -> bytes:
    """`body` decoded per its Content-Encoding, at most MAX_BODY_BYTES; raises BodyError."""
    if encoding in ("", "identity"):
        return body
    wbits = _WBITS.get(encoding)
    if wbits is None:
        raise BodyError(
            400, f"Content-Encoding {encoding!r} is not supported; send gzip, deflate or none"
        )
    if encoding == "deflate" and body and body[0] & 0x0F != 8:
        wbits = -zlib.MAX_WBITS  # no zlib header: raw deflate
    decompressor = zlib.decompressobj(wbits)
    try:
        out = decompressor.decompress(body, MAX_BODY_BYTES + 1)
    except zlib.error as exc:
        raise BodyError(400, f"request body is not valid {encoding} data: {exc}") from None
    if len(out) > MAX_BODY_BYTES:
        raise BodyError(413, TOO_LARGE + " (after decompression)")
    if not decompressor.eof:
        raise BodyError(400, f"request body is truncated {encoding} data")
    return out


async def read_body(request: web.Request, metrics: Metrics, endpoint: str) -> bytes | web.Response:
    """The decoded body, or the 400/408/413 answer explaining why it cannot be a review."""
    # The exact header the API server sends is checked first: parsing it costs more.
    headers = request.headers
    exact = headers.get("Content-Type") == "application/json"
    if not exact and request.content_type != "application/json":
        metrics.rejected.labels(endpoint, "400").inc()
        got = headers.get("Content-Type", "none")
        return plain(400, f"Content-Type must be application/json, got {got}")
    # request.content_length's value, without its interpreted property.
    declared = headers.get("Content-Length")
    if declared is not None and int(declared) > MAX_BODY_BYTES:
        metrics.rejected.labels(endpoint, "413").inc()
        return plain(413, TOO_LARGE)
    try:
        content = request.content
        if content.is_eof():
            # The whole body came with the headers (what the API server sends): reading it
            # cannot wait, so no deadline timer is armed (~5 µs a review, most of them), and
            # it is taken from the stream's buffer as it is: request.read() (interpreted)
            # would copy it through a bytearray. Its size check (client_max_size, 0: none)
            # is made here, with the answer its HTTPRequestEntityTooLarge gets below.
            raw = content.read_nowait()
            limit = request.client_max_size
            if limit and len(raw) > limit:
                metrics.rejected.labels(endpoint, "413").inc()
                return plain(413, TOO_LARGE)
        else:
            async with asyncio.timeout(BODY_TIMEOUT):
                raw = await request.read()
        body = decode_content(raw, headers.get("Content-Encoding", "").strip().lower())
    except TimeoutError:
        metrics.rejected.labels(endpoint, "408").inc()
        answer = plain(408, f"the request body did not arrive within {BODY_TIMEOUT:g} seconds")
        answer.force_close()
        return answer
    except web.HTTPRequestEntityTooLarge:
        metrics.rejected.labels(endpoint, "413").inc()
        return plain(413, TOO_LARGE)
    except BodyError as exc:
        metrics.rejected.labels(endpoint, str(exc.status)).inc()
        return plain(exc.status, str(exc))
    except (ConnectionError, web.RequestPayloadError):
        # The client went away mid-body (or broke the chunked framing): nobody reads an answer,
        # and it is not the webhook's error.
        log.debug("client disconnected before sending the whole body of %s", request.path)
        return plain(400, "the request body ended early")
    if not body.strip():
        metrics.rejected.labels(endpoint, "400").inc()
        return plain(400, "request body is empty; expected an AdmissionReview JSON object")
    return body
