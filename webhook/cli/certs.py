"""`gpu-webhook certs`: a CA and a serving certificate for the webhook's Service."""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from webhook.tls.certs import (
    DEFAULT_NAMESPACE,
    DEFAULT_SERVICE,
    CertKeyPair,
    check_dns_names,
    load_ca,
    service_dns_names,
    write_certificates,
)

# Ten years: the chart's own generatedCertValidityDays default. A longer-lived key is a
# longer-lived risk, and past ~2^31 days the date arithmetic itself overflows.
MAX_DAYS = 3650
# Kubernetes validation (k8s.io/apimachinery/pkg/util/validation): a Service name is a DNS-1035
# label (starts with a letter), a namespace a DNS-1123 label; both at most 63 characters.
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def add_certs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--service",
        default=DEFAULT_SERVICE,
        help="Service name: the chart's is <release>-gpu-admission-webhook "
        "(default: %(default)s, release gaw as in the README)",
    )
    parser.add_argument(
        "--namespace", default=DEFAULT_NAMESPACE, help="Service namespace (default: %(default)s)"
    )
    parser.add_argument("--out", default="certs", help="output directory (default: %(default)s/)")
    parser.add_argument(
        "--days",
        type=int,
        default=365,
        help=f"validity in days, 1-{MAX_DAYS} (default: %(default)s)",
    )
    parser.add_argument(
        "--new-ca",
        action="store_true",
        help="replace the CA in --out (default: reuse it: a new CA invalidates every caBundle "
        "that holds the old one)",
    )
    parser.add_argument(
        "--ip",
        action="append",
        default=[],
        metavar="ADDR",
        help="extra IP address SAN (repeatable), e.g. 127.0.0.1 for a local run",
    )
    parser.add_argument(
        "--dns",
        action="append",
        default=[],
        metavar="NAME",
        help="extra DNS name SAN (repeatable), e.g. localhost",
    )


def _valid_ips(values: Iterable[str]) -> list[str]:
    ips = []
    for value in values:
        try:
            ips.append(str(ipaddress.ip_address(value)))
        except ValueError as exc:
            raise ValueError(f"--ip {value!r} is not an IP address") from exc
    return ips


def _check_arguments(args: argparse.Namespace) -> None:
    """Raise ValueError with the reason when an argument cannot make a usable certificate."""
    if not 1 <= args.days <= MAX_DAYS:
        raise ValueError(
            f"--days must be between 1 and {MAX_DAYS} (ten years), got {args.days}; "
            "renew rather than issue a longer-lived certificate"
        )
    if len(args.service) > 63 or not _DNS1035_LABEL.fullmatch(args.service):
        raise ValueError(
            f"--service {args.service!r} is not a Service name: lower-case letters, digits and "
            "'-', starting with a letter, at most 63 characters"
        )
    if len(args.namespace) > 63 or not _DNS1123_LABEL.fullmatch(args.namespace):
        raise ValueError(
            f"--namespace {args.namespace!r} is not a namespace name: lower-case letters, "
            "digits and '-', at most 63 characters"
        )


def _existing_ca(out: Path, days: int) -> CertKeyPair | None:
    """The CA already in `out` (reused), None when there is none; raises ValueError."""
    cert, key = out / "ca.crt", out / "ca.key"
    if not cert.exists() and not key.exists():
        return None
    if not (cert.exists() and key.exists()):
        present = cert if cert.exists() else key
        raise ValueError(f"{present} exists without its pair; pass --new-ca to replace the CA")
    try:
        ca = load_ca(cert, key)
    except ValueError as exc:
        raise ValueError(f"{exc}; pass --new-ca to replace the CA") from None
    expires = ca.certificate.not_valid_after_utc
    if expires < dt.datetime.now(dt.UTC) + dt.timedelta(days=days):
        raise ValueError(
            f"the CA in {cert} expires on {expires:%Y-%m-%d}, before the {days} days asked; "
            "use fewer --days, or --new-ca (then update every caBundle)"
        )
    return ca


def certs_command(args: argparse.Namespace) -> int:
    """`gpu-webhook certs`: write ca.crt, ca.key, tls.crt, tls.key; exit 2 on bad input."""
    out = Path(args.out)
    try:
        _check_arguments(args)
        ips = _valid_ips(args.ip)
        dns_names = service_dns_names(args.service, args.namespace) + list(args.dns)
        check_dns_names(dns_names)
        ca = None if args.new_ca else _existing_ca(out, args.days)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        # A new CA lives MAX_DAYS, so later runs renew the serving certificate under it.
        paths = write_certificates(out, dns_names, ips, days=args.days, ca=ca, ca_days=MAX_DAYS)
    except (OSError, ValueError) as exc:
        print(f"error: cannot write certificates into {out}: {exc}", file=sys.stderr)
        return 2
    if ca is None:
        print(f"wrote a new CA {paths.ca_cert}, {paths.ca_key}")
    else:
        print(f"reused the CA {paths.ca_cert} (installed caBundles stay valid)")
    print(f"wrote {paths.cert}, {paths.key}")
    print(f"serving certificate names: {', '.join(dns_names + ips)}; valid {args.days} days")
    print(f"caBundle: base64 -w0 {paths.ca_cert}")
    return 0
