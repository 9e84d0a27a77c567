"""Bounds on what one client can hold: read deadlines, shutdown timings (SPEC §7)."""

from __future__ import annotations

# A connection must deliver its request headers within this many seconds of being accepted (or of
# its previous response). aiohttp's RequestHandler arms its keep-alive timer when the connection
# is made and force-closes it on expiry while the handler still waits for a complete message
# (aiohttp 3.14 web_protocol.py connection_made/_process_keepalive), so `keepalive_timeout` is
# both the idle timeout and the header deadline. The API server's webhook client re-dials a
# closed idle connection, so a short idle timeout costs a TLS handshake, never an admission.
HEADER_TIMEOUT = 5.0
# The whole body must arrive within this many seconds of the headers: a trickled body is
# answered 408 and the connection closed, so 1,500 slow clients hold memory for seconds only.
BODY_TIMEOUT = 5.0
# asyncio's default TLS handshake timeout is 60 s: a client that connects and never finishes
# the handshake would hold a socket and an SSL object that long.
TLS_HANDSHAKE_TIMEOUT = 5.0
# After an early answer (408/413) aiohttp keeps reading and discarding the rest of the body for
# `lingering_time` (default 10 s) so the client can read the answer; a slow client would use
# that to stay connected, so it is short.
LINGER_SECONDS = 1.0
# SIGTERM: /readyz turns 503 at once and reviews are still answered (with Connection: close)
# for this long, so endpoint removal reaches every API server before the listener closes.
DEFAULT_DRAIN_SECONDS = 5.0
# Then reviews in flight get this long to finish: the API server's timeoutSeconds is a few
# seconds, so a review still running after 10 s has already been given up on.
SHUTDOWN_GRACE_SECONDS = 10.0
# Then the connections are closed, each once its last answer is written, within this long.
CLOSE_SECONDS = 2.0
# Open admission connections at most; past it a new connection is closed at once. Each slow
# client costs ~220 KiB (TLS and socket buffers plus what it sent, bench/bench_slow_clients.py),
# so 2,000 stay well inside the chart's 640 Mi memory limit whatever an attacker opens; an API
# server keeps a few dozen connections per replica.
DEFAULT_MAX_CONNECTIONS = 2000
