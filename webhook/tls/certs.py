"""TLS material: a CA and a serving certificate, the server SSL context, and reload on rotation."""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import os
import ssl
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger(__name__)

# The chart's Service is `<release>-gpu-admission-webhook` (templates/_helpers.tpl
# "gaw.fullname"); these match the README's install: release `gaw` in namespace
# `gpu-admission-webhook`.
DEFAULT_SERVICE = "gaw-gpu-admission-webhook"
DEFAULT_NAMESPACE = "gpu-admission-webhook"
# Certificates are valid from a little in the past so a node with a slightly slow clock
# (the API server's) does not reject a certificate generated a second ago.
_BACKDATE = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class CertKeyPair:
    """A certificate and its private key, both as PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def private_key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError("expected an EC private key")
        return key


@dataclass(frozen=True)
class CertPaths:
    ca_cert: Path
    ca_key: Path
    cert: Path
    key: Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256: accepted by every Kubernetes API server and much cheaper to handshake than RSA.
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def generate_ca(common_name: str = "gpu-admission-webhook CA", *, days: int = 365) -> CertKeyPair:
    """A self-signed CA that may only sign certificates (and CRLs)."""
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertKeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def generate_serving_cert(
    ca: CertKeyPair,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    *,
    days: int = 365,
) -> CertKeyPair:
    """A server certificate for `dns_names` and `ip_addresses`, signed by `ca`."""
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    key = _new_key()
    ca_cert = ca.certificate
    ca_key = ca.private_key
    now = dt.datetime.now(dt.UTC)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    common_name = dns_names[0] if dns_names else ip_addresses[0]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        # Go (the API server) matches only SANs, never the CN, since Go 1.15.
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return CertKeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def service_dns_names(service: str, namespace: str) -> list[str]:
    """Every name the API server may use to reach a Service."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def write_file(path: Path, data: bytes, *, private: bool = False) -> None:
    """Write atomically (temp file + rename) so a reader never sees half a PEM file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600 if private else 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_ca(cert_file: Path, key_file: Path) -> CertKeyPair:
    """An existing CA pair; raises ValueError saying what is wrong with it."""
    try:
        pair = CertKeyPair(cert_file.read_bytes(), key_file.read_bytes())
        certificate, key = pair.certificate, pair.private_key
    except OSError as exc:
        raise ValueError(f"cannot read the CA: {exc}") from exc
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{cert_file} and {key_file} are not a PEM CA pair: {exc}") from exc
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.value.ca:
        raise ValueError(f"{cert_file} is not a CA certificate")
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if certificate.public_key().public_bytes(der, public) != key.public_key().public_bytes(
        der, public
    ):
        raise ValueError(f"{key_file} is not the key of {cert_file}")
    return pair


def write_certificates(
    out_dir: Path,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    *,
    days: int = 365,
    ca: CertKeyPair | None = None,
    ca_days: int | None = None,
) -> CertPaths:
    """A serving cert into `out_dir` as tls.crt, tls.key, signed by `ca` (reused: ca.crt and
    ca.key are rewritten unchanged) or by a new CA written as ca.crt, ca.key."""
    ca = ca or generate_ca(days=max(days, ca_days or days))
    serving = generate_serving_cert(ca, dns_names, ip_addresses, days=days)
    paths = CertPaths(
        ca_cert=out_dir / "ca.crt",
        ca_key=out_dir / "ca.key",
        cert=out_dir / "tls.crt",
        key=out_dir / "tls.key",
    )
    write_file(paths.ca_cert, ca.cert_pem)
    write_file(paths.ca_key, ca.key_pem, private=True)
    write_file(paths.cert, serving.cert_pem)
    write_file(paths.key, serving.key_pem, private=True)
    return paths


def create_server_ssl_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A server context that refuses anything older than TLS 1.2 (SPEC §7)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


def _signature(path: Path) -> tuple[int, int, int, int]:
    # os.stat follows symlinks: kubelet/cert-manager rotate a mounted Secret by swapping the
    # `..data` symlink, which changes the resolved inode even when mtimes look unchanged.
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


class CertReloader:
    """Reload the serving pair into a live SSL context when its files change.

    New handshakes use the new certificate; open connections keep theirs. A pair that does
    not load (half-written, or key and cert from different rotations) is skipped and logged,
    and the previous pair stays in force until a good pair appears.
    """

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.reloads = 0
        self.failures = 0
        self._seen: tuple[tuple[int, int, int, int], tuple[int, int, int, int]] | None = None
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.certificate: x509.Certificate | None = None
        if not self._load():
            raise ValueError(
                f"cannot load the serving certificate {cert_file} with key {key_file}; "
                "check that both files exist, are PEM, and belong together"
            )

    @property
    def expiry_timestamp(self) -> float:
        """Unix time when the certificate in force expires (for a Prometheus alert)."""
        return self.certificate.not_valid_after_utc.timestamp() if self.certificate else 0.0

    @property
    def serial(self) -> int:
        return self.certificate.serial_number if self.certificate else 0

    def check(self) -> bool:
        """Cheap when nothing changed (two stat calls); returns True when a new pair is in force."""
        try:
            signature = (_signature(self.cert_file), _signature(self.key_file))
        except OSError as exc:
            log.warning(
                "cannot stat the serving certificate files, keeping the current pair: %s", exc
            )
            return False
        if signature == self._seen:
            return False
        if self._load():
            self.reloads += 1
            log.info(
                "reloaded the serving certificate %s (serial %x, expires %s)",
                self.cert_file,
                self.serial,
                self.certificate.not_valid_after_utc.isoformat() if self.certificate else "?",
            )
            return True
        return False

    def _load(self) -> bool:
        try:
            signature = (_signature(self.cert_file), _signature(self.key_file))
            cert_pem = self.cert_file.read_bytes()
            key_pem = self.key_file.read_bytes()
        except OSError as exc:
            self.failures += 1
            log.error("cannot read the serving certificate pair: %s", exc)
            return False
        with tempfile.TemporaryDirectory(prefix="gpu-webhook-tls-") as tmp:
            # Load the exact bytes read above, first into a scratch context: a key that does not
            # match the cert would otherwise leave the live context with no usable key.
            cert_copy, key_copy = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            write_file(cert_copy, cert_pem)
            write_file(key_copy, key_pem, private=True)
            try:
                certificate = x509.load_pem_x509_certificate(cert_pem)
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_copy, key_copy)
            except (ssl.SSLError, ValueError) as exc:
                self.failures += 1
                # Remember this signature so a broken pair is reported once, not every tick.
                self._seen = signature
                log.error(
                    "the serving certificate %s and key %s do not load (%s); "
                    "keeping the previous certificate until a valid pair is written",
                    self.cert_file,
                    self.key_file,
                    exc,
                )
                return False
            self.context.load_cert_chain(cert_copy, key_copy)
        self.certificate = certificate
        self._seen = signature
        return True


def check_dns_names(names: Iterable[str]) -> None:
    """Raise ValueError when a name cannot go into a certificate's subjectAltName."""
    x509.SubjectAlternativeName([x509.DNSName(n) for n in names])
