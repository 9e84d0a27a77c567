"""`gpu-webhook certs`: a CA and a serving certificate for the webhook's Service."""

from __future__ import annotations

import argparse
import ipaddress
import sys
from collections.abc import Iterable
from pathlib import Path

from webhook.tls.certs import (
    DEFAULT_NAMESPACE,
    DEFAULT_SERVICE,
    check_dns_names,
    service_dns_names,
    write_certificates,
)


def add_certs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--service", default=DEFAULT_SERVICE, help="Service name (default: %(default)s)"
    )
    parser.add_argument(
        "--namespace", default=DEFAULT_NAMESPACE, help="Service namespace (default: %(default)s)"
    )
    parser.add_argument("--out", default="certs", help="output directory (default: %(default)s/)")
    parser.add_argument(
        "--days", type=int, default=365, help="validity in days (default: %(default)s)"
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


def certs_command(args: argparse.Namespace) -> int:
    """`gpu-webhook certs`: write ca.crt, ca.key, tls.crt, tls.key; exit 2 on bad input."""
    if args.days < 1:
        print(f"error: --days must be at least 1, got {args.days}", file=sys.stderr)
        return 2
    try:
        ips = _valid_ips(args.ip)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    dns_names = service_dns_names(args.service, args.namespace) + list(args.dns)
    try:
        check_dns_names(dns_names)
        paths = write_certificates(Path(args.out), dns_names, ips, days=args.days)
    except (OSError, ValueError) as exc:
        print(f"error: cannot write certificates into {args.out}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {paths.ca_cert}, {paths.ca_key}, {paths.cert}, {paths.key}")
    print(f"serving certificate names: {', '.join(dns_names + ips)}; valid {args.days} days")
    print(f"caBundle: base64 -w0 {paths.ca_cert}")
    return 0
