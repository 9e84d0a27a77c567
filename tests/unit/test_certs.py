"""CA and serving certificate generation, the `certs` command, and certificate reload."""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import logging
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from webhook.cli.certs import add_certs_arguments, certs_command
from webhook.tls.certs import (
    CertReloader,
    create_server_ssl_context,
    generate_ca,
    generate_serving_cert,
    service_dns_names,
    write_certificates,
    write_file,
)


def run_certs(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    add_certs_arguments(parser)
    return certs_command(parser.parse_args(list(argv)))


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_service_dns_names() -> None:
    assert service_dns_names("hook", "gpu") == [
        "hook",
        "hook.gpu",
        "hook.gpu.svc",
        "hook.gpu.svc.cluster.local",
    ]


def test_certs_command_writes_a_ca_and_a_serving_cert(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    code = run_certs("--service", "hook", "--namespace", "gpu", "--out", str(out), "--days", "30")
    assert code == 0
    ca, serving = load(out / "ca.crt"), load(out / "tls.crt")

    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    ca_usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert (ca_usage.key_cert_sign, ca_usage.crl_sign, ca_usage.digital_signature) == (
        True,
        True,
        False,
    )

    assert serving.issuer == ca.subject
    serving.verify_directly_issued_by(ca)
    assert serving.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usage = serving.extensions.get_extension_for_class(x509.KeyUsage).value
    assert (usage.digital_signature, usage.key_encipherment, usage.key_cert_sign) == (
        True,
        True,
        False,
    )
    eku = serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == service_dns_names("hook", "gpu")
    assert sans.get_values_for_type(x509.IPAddress) == []

    lifetime = serving.not_valid_after_utc - serving.not_valid_before_utc
    # Backdated by five minutes against clock skew, valid for the requested 30 days.
    assert lifetime == dt.timedelta(days=30, minutes=5)
    now = dt.datetime.now(dt.UTC)
    assert serving.not_valid_before_utc < now < serving.not_valid_after_utc


def test_keys_are_private_and_certs_readable(tmp_path: Path) -> None:
    assert run_certs("--out", str(tmp_path)) == 0
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"ca.crt": 0o644, "ca.key": 0o600, "tls.crt": 0o644, "tls.key": 0o600}


def test_default_names_and_extra_sans(tmp_path: Path) -> None:
    assert run_certs("--out", str(tmp_path), "--ip", "127.0.0.1", "--dns", "localhost") == 0
    sans = load(tmp_path / "tls.crt").extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert sans.value.get_values_for_type(x509.DNSName) == [
        # The chart's Service for the README's install (release gaw, namespace
        # gpu-admission-webhook): <release>-gpu-admission-webhook.
        *service_dns_names("gaw-gpu-admission-webhook", "gpu-admission-webhook"),
        "localhost",
    ]
    assert sans.value.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--days", "0"],
            "error: --days must be between 1 and 3650 (ten years), got 0; renew rather than "
            "issue a longer-lived certificate\n",
        ),
        (
            ["--days", "99999999"],
            "error: --days must be between 1 and 3650 (ten years), got 99999999; renew rather "
            "than issue a longer-lived certificate\n",
        ),
        (
            ["--service", "Web_Hook"],
            "error: --service 'Web_Hook' is not a Service name: lower-case letters, digits and "
            "'-', starting with a letter, at most 63 characters\n",
        ),
        (
            ["--service", "1hook"],
            "error: --service '1hook' is not a Service name: lower-case letters, digits and "
            "'-', starting with a letter, at most 63 characters\n",
        ),
        (
            ["--namespace", "a.b"],
            "error: --namespace 'a.b' is not a namespace name: lower-case letters, digits and "
            "'-', at most 63 characters\n",
        ),
        (
            ["--namespace", "n" * 64],
            f"error: --namespace '{'n' * 64}' is not a namespace name: lower-case letters, "
            "digits and '-', at most 63 characters\n",
        ),
        (["--ip", "not-an-ip"], "error: --ip 'not-an-ip' is not an IP address\n"),
    ],
)
def test_certs_command_refuses_bad_input(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_certs("--out", str(tmp_path / "c"), *argv) == 2
    assert capsys.readouterr().err == message
    assert not (tmp_path / "c").exists()


def test_server_context_refuses_old_tls(tmp_path: Path) -> None:
    paths = write_certificates(tmp_path, ["localhost"], ["127.0.0.1"])
    context = create_server_ssl_context(paths.cert, paths.key)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_serving_cert_needs_a_name() -> None:
    with pytest.raises(ValueError, match="at least one DNS name or IP address"):
        generate_serving_cert(generate_ca(), [])


def served_serial(server_context: ssl.SSLContext, ca_file: Path) -> int:
    """Serial of the certificate a TLS handshake with `server_context` presents (in memory)."""
    client_context = ssl.create_default_context(cafile=str(ca_file))
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_context.wrap_bio(c_in, c_out, server_hostname="localhost")
    server = server_context.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):
        for name, end in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            break
    der = client.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def rotate(paths_dir: Path, ca_dir: Path) -> x509.Certificate:
    """Write a new serving pair signed by the CA in `ca_dir` into `paths_dir`."""
    from webhook.tls.certs import CertKeyPair

    ca = CertKeyPair((ca_dir / "ca.crt").read_bytes(), (ca_dir / "ca.key").read_bytes())
    pair = generate_serving_cert(ca, ["localhost"])
    write_file(paths_dir / "tls.crt", pair.cert_pem)
    write_file(paths_dir / "tls.key", pair.key_pem, private=True)
    return pair.certificate


def test_reloader_picks_up_a_rotated_pair(tmp_path: Path) -> None:
    paths = write_certificates(tmp_path, ["localhost"])
    reloader = CertReloader(paths.cert, paths.key)
    first = reloader.serial
    assert first == load(paths.cert).serial_number
    assert reloader.check() is False  # nothing changed

    new = rotate(tmp_path, tmp_path)
    assert reloader.check() is True
    assert reloader.serial == new.serial_number != first
    assert reloader.expiry_timestamp == new.not_valid_after_utc.timestamp()
    assert reloader.reloads == 1


def test_reloader_follows_a_symlink_swap(tmp_path: Path) -> None:
    # The kubelet's atomic writer: tls.crt -> ..data/tls.crt, ..data -> a timestamped dir.
    gen1, gen2 = tmp_path / "gen1", tmp_path / "gen2"
    write_certificates(gen1, ["localhost"])
    (tmp_path / "..data").symlink_to(gen1)
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).symlink_to(Path("..data") / name)
    reloader = CertReloader(tmp_path / "tls.crt", tmp_path / "tls.key")
    new = rotate(gen2, gen1)
    (tmp_path / "..data_tmp").symlink_to(gen2)
    (tmp_path / "..data_tmp").replace(tmp_path / "..data")
    assert reloader.check() is True
    assert reloader.serial == new.serial_number


def test_reloader_keeps_the_old_pair_when_the_new_one_is_half_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    paths = write_certificates(tmp_path, ["localhost"])
    reloader = CertReloader(paths.cert, paths.key)
    old_serial = reloader.serial
    old_key = paths.key.read_bytes()

    # New certificate written, key still the old one: the pair does not match.
    rotate(tmp_path, tmp_path)
    paths.key.write_bytes(old_key)
    with caplog.at_level(logging.ERROR, logger="webhook.tls.certs"):
        assert reloader.check() is False
    assert reloader.serial == old_serial
    assert reloader.failures == 1
    assert "keeping the previous certificate until a valid pair is written" in caplog.text

    # Truncated PEM: same outcome.
    paths.cert.write_bytes(paths.cert.read_bytes()[:100])
    assert reloader.check() is False
    assert reloader.serial == old_serial

    # The live context still serves the old pair.
    assert served_serial(reloader.context, paths.ca_cert) == old_serial

    # Once a full, matching pair is written it is picked up.
    new = rotate(tmp_path, tmp_path)
    assert reloader.check() is True
    assert reloader.serial == new.serial_number
    assert served_serial(reloader.context, paths.ca_cert) == new.serial_number


def test_reloader_refuses_to_start_without_a_valid_pair(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot load the serving certificate"):
        CertReloader(tmp_path / "missing.crt", tmp_path / "missing.key")


def test_a_new_ca_outlives_its_serving_certificate(tmp_path: Path) -> None:
    assert run_certs("--out", str(tmp_path), "--days", "30") == 0
    lifetime = load(tmp_path / "ca.crt").not_valid_after_utc - dt.datetime.now(dt.UTC)
    assert lifetime > dt.timedelta(days=3649)


def test_a_second_run_reuses_the_ca_so_installed_ca_bundles_stay_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_certs("--out", str(tmp_path)) == 0
    ca_before = (tmp_path / "ca.crt").read_bytes()
    serving_before = (tmp_path / "tls.crt").read_bytes()
    capsys.readouterr()
    assert run_certs("--out", str(tmp_path), "--dns", "localhost") == 0
    assert capsys.readouterr().out.startswith(
        f"reused the CA {tmp_path / 'ca.crt'} (installed caBundles stay valid)\n"
    )
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    serving = load(tmp_path / "tls.crt")
    assert serving.public_bytes(serialization.Encoding.PEM) != serving_before
    serving.verify_directly_issued_by(load(tmp_path / "ca.crt"))


def test_new_ca_replaces_it_only_when_asked(tmp_path: Path) -> None:
    assert run_certs("--out", str(tmp_path)) == 0
    ca_before = (tmp_path / "ca.crt").read_bytes()
    assert run_certs("--out", str(tmp_path), "--new-ca") == 0
    assert (tmp_path / "ca.crt").read_bytes() != ca_before
    load(tmp_path / "tls.crt").verify_directly_issued_by(load(tmp_path / "ca.crt"))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("drop-key", "ca.crt exists without its pair; pass --new-ca to replace the CA"),
        ("swap-key", "ca.key is not the key of {out}/ca.crt; pass --new-ca to replace the CA"),
        ("serving-as-ca", "ca.crt is not a CA certificate; pass --new-ca to replace the CA"),
        ("garbage", "are not a PEM CA pair"),
    ],
)
def test_a_broken_existing_ca_is_refused_not_replaced(
    tmp_path: Path, damage: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_certs("--out", str(tmp_path)) == 0
    if damage == "drop-key":
        (tmp_path / "ca.key").unlink()
    elif damage == "swap-key":
        (tmp_path / "ca.key").write_bytes((tmp_path / "tls.key").read_bytes())
    elif damage == "serving-as-ca":
        (tmp_path / "ca.crt").write_bytes((tmp_path / "tls.crt").read_bytes())
        (tmp_path / "ca.key").write_bytes((tmp_path / "tls.key").read_bytes())
    else:
        (tmp_path / "ca.crt").write_text("not a certificate")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    capsys.readouterr()
    assert run_certs("--out", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert message.format(out=tmp_path) in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_ca_expiring_before_the_serving_cert_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A CA of 30 days (a new CA from `certs` lives ten years; this one came from elsewhere).
    write_certificates(tmp_path, ["hook"], days=30)
    assert run_certs("--out", str(tmp_path), "--days", "365") == 2
    err = capsys.readouterr().err
    assert "before the 365 days asked; use fewer --days, or --new-ca" in err
