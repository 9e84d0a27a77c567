"""TLS of the real server: protocol floor and certificate rotation without a restart."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from tests.integration.helpers import RunningServer, metric_samples, ready_store, serve_in_thread
from webhook.admission.app import create_app
from webhook.core.config.model import WebhookConfig
from webhook.tls.certs import (
    CertKeyPair,
    CertPaths,
    CertReloader,
    generate_serving_cert,
    write_certificates,
    write_file,
)


def handshake(port: int, context: ssl.SSLContext) -> tuple[str | None, int]:
    """Connect, finish the TLS handshake, return (protocol version, server cert serial)."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        return tls.version(), x509.load_der_x509_certificate(der).serial_number


def tls11_client(ca_file: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file))
    # OpenSSL 3 disables TLS < 1.2 at its default security level; level 0 lets the client try.
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    context.minimum_version = ssl.TLSVersion.TLSv1_1
    context.maximum_version = ssl.TLSVersion.TLSv1_1
    return context


def test_tls_1_2_and_1_3_are_accepted(server: RunningServer) -> None:
    client = server.client_context()
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    assert handshake(server.port, client)[0] == "TLSv1.2"
    assert handshake(server.port, server.client_context())[0] == "TLSv1.3"


@pytest.fixture
def permissive_server(tls: CertPaths) -> Iterator[int]:
    """A plain TLS server that does accept TLS 1.1: proves our client can really speak it."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    context.minimum_version = ssl.TLSVersion.TLSv1_1
    context.load_cert_chain(tls.cert, tls.key)
    loop = asyncio.new_event_loop()

    async def start() -> asyncio.Server:
        async def close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        return await asyncio.start_server(close, "127.0.0.1", 0, ssl=context)

    srv = loop.run_until_complete(start())
    port = srv.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        srv.close()
        loop.close()


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_tls_1_1_is_refused(server: RunningServer, permissive_server: int, tls: CertPaths) -> None:
    # Control: the same client completes a TLS 1.1 handshake with a server that allows it.
    assert handshake(permissive_server, tls11_client(tls.ca_cert))[0] == "TLSv1.1"
    with pytest.raises(ssl.SSLError):
        handshake(server.port, tls11_client(tls.ca_cert))
    # The refusal does not disturb the server.
    assert server.request("GET", "/healthz").status == 200


def test_untrusted_clients_see_a_certificate_error(server: RunningServer, tmp_path: Path) -> None:
    other = write_certificates(tmp_path, ["localhost"])
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server.port, ssl.create_default_context(cafile=str(other.ca_cert)))


@pytest.fixture
def rotating(tmp_path: Path, policy_dir: Path) -> Iterator[tuple[RunningServer, CertPaths]]:
    paths = write_certificates(tmp_path, ["localhost"], ["127.0.0.1"])
    reloader = CertReloader(paths.cert, paths.key)
    store = ready_store(policy_dir)
    app = create_app(WebhookConfig(), store, cert_reloader=reloader, cert_reload_interval=0.05)
    with serve_in_thread(app, reloader.context, paths.ca_cert, store) as running:
        yield running, paths


def wait_for_serial(running: RunningServer, serial: int) -> int:
    """New connections until one presents `serial`, or 10 s pass; returns the last serial."""
    seen = 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        seen = handshake(running.port, running.client_context())[1]
        if seen == serial:
            break
        time.sleep(0.05)
    return seen


def test_rotated_certificate_is_served_to_new_connections(
    rotating: tuple[RunningServer, CertPaths],
) -> None:
    running, paths = rotating
    first = handshake(running.port, running.client_context())[1]
    assert first == x509.load_pem_x509_certificate(paths.cert.read_bytes()).serial_number

    # A kept-alive connection opened before the rotation.
    with (
        socket.create_connection(("127.0.0.1", running.port), timeout=10) as raw,
        running.client_context().wrap_socket(raw, server_hostname="localhost") as before,
    ):
        ca = CertKeyPair(paths.ca_cert.read_bytes(), paths.ca_key.read_bytes())
        new = generate_serving_cert(ca, ["localhost"], ["127.0.0.1"])
        # cert-manager style: both files replaced, each atomically.
        write_file(paths.key, new.key_pem, private=True)
        write_file(paths.cert, new.cert_pem)

        assert wait_for_serial(running, new.certificate.serial_number) == (
            new.certificate.serial_number
        )
        der = before.getpeercert(binary_form=True)
        assert der is not None
        assert x509.load_der_x509_certificate(der).serial_number == first
    assert running.request("GET", "/healthz").status == 200
    metrics = running.request("GET", "/metrics").text
    expiry = new.certificate.not_valid_after_utc.timestamp()
    assert metric_samples(metrics)["gpu_webhook_serving_certificate_expiry_timestamp_seconds"] == (
        pytest.approx(expiry)
    )


def test_a_broken_rotation_keeps_serving_the_old_certificate(
    rotating: tuple[RunningServer, CertPaths],
) -> None:
    running, paths = rotating
    first = handshake(running.port, running.client_context())[1]
    write_file(paths.cert, b"-----BEGIN CERTIFICATE-----\nMIIB")  # half-written
    reloader = running.app_state().cert_reloader
    assert reloader is not None
    deadline = time.monotonic() + 10
    while reloader.failures == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reloader.failures == 1
    assert handshake(running.port, running.client_context())[1] == first
    assert running.request("GET", "/healthz").status == 200
