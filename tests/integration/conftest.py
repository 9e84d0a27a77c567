"""Fixtures that run the real admission server over real TLS in a background thread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import (
    CODECS,
    RunningServer,
    codec_named,
    ready_store,
    serve_in_thread,
    write_policies,
)
from webhook.admission.app import create_app
from webhook.admission.jsoncodec import JsonCodec
from webhook.core.config.model import WebhookConfig
from webhook.tls.certs import CertPaths, CertReloader, write_certificates


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> CertPaths:
    return write_certificates(tmp_path_factory.mktemp("tls"), ["localhost"], ["127.0.0.1"], days=2)


@pytest.fixture(scope="session")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_policies(tmp_path_factory.mktemp("policies"))


@pytest.fixture(scope="module", params=CODECS)
def codec(request: pytest.FixtureRequest) -> JsonCodec:
    """Each JSON codec of the request path in turn: every test using `server` runs under both."""
    return codec_named(request.param)


@pytest.fixture(scope="module")
def server(tls: CertPaths, policy_dir: Path, codec: JsonCodec) -> Iterator[RunningServer]:
    """One server per module and codec: test policies, default config, real TLS."""
    store = ready_store(policy_dir)
    reloader = CertReloader(tls.cert, tls.key)
    app = create_app(
        WebhookConfig(), store, codec=codec, cert_reloader=reloader, cert_reload_interval=0
    )
    with serve_in_thread(app, reloader.context, tls.ca_cert, store) as running:
        yield running
