"""`gpu-webhook serve`: arguments, TLS files, policy source, then the admission server."""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import ipaddress
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from webhook.admission.app import create_app
from webhook.admission.jsoncodec import json_codec
from webhook.admission.limits import DEFAULT_DRAIN_SECONDS, DEFAULT_MAX_CONNECTIONS
from webhook.admission.logs import BatchedStreamHandler, configure_logging
from webhook.admission.review_handler import review_log
from webhook.admission.runner import loop_factory, serve_app
from webhook.admission.state import PolicySource
from webhook.cli.exits import CommandError
from webhook.cli.images import add_registry_arguments, registry_client
from webhook.core.audit.reports import DEFAULT_OWNER
from webhook.core.base.errors import ConfigError, ManifestError
from webhook.core.config.model import WebhookConfig, load_config
from webhook.registry.resolver import ImageResolver
from webhook.sources.files import FileSource
from webhook.sources.store import PolicyStore
from webhook.tls.certs import CertReloader, write_certificates

if TYPE_CHECKING:
    from webhook.sources.registration import Registered

log = logging.getLogger(__name__)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="0.0.0.0", help="listen address (default: %(default)s)")
    parser.add_argument(
        "--port", type=_port, default=8443, help="HTTPS port, 1-65535 (default: %(default)s)"
    )
    parser.add_argument(
        "--metrics-port",
        type=_port_or_off,
        default=0,
        help="plain-HTTP port for /metrics, /healthz, /readyz (default: 0 = off)",
    )
    parser.add_argument(
        "--max-connections",
        type=_max_connections,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help="open HTTPS connections at most; more are closed at once, so slow clients cannot "
        "exhaust memory (default: %(default)s)",
    )
    parser.add_argument(
        "--drain-seconds",
        type=_drain,
        default=DEFAULT_DRAIN_SECONDS,
        metavar="SECONDS",
        help="on SIGTERM: keep answering reviews (Connection: close) this long while /readyz "
        "answers 503, then stop accepting (default: %(default)s)",
    )
    parser.add_argument(
        "--ready-timeout",
        type=_ready_timeout,
        default=30.0,
        metavar="SECONDS",
        help="in a cluster: /readyz waits this long for the first list of Nodes and DRA claims "
        "after the policies; then ready, with placement not enforced until it arrives "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--decision-cache-mib",
        type=_cache_mib,
        default=16.0,
        metavar="MIB",
        help="memory for answers to the pods one controller creates (generateName: reviews "
        "that differ only in what the API server sets per pod), emptied on any policy, config, "
        "node or claim change; 0 turns it off (default: %(default)s)",
    )
    parser.add_argument("--tls-cert", metavar="FILE", help="serving certificate (PEM), reloaded")
    parser.add_argument("--tls-key", metavar="FILE", help="serving key (PEM), reloaded")
    parser.add_argument(
        "--self-signed",
        action="store_true",
        help="generate a CA and a localhost serving certificate into --cert-dir",
    )
    parser.add_argument(
        "--cert-dir",
        metavar="DIR",
        help="with --self-signed: where to write them (default: a fresh temp dir); "
        "otherwise: read DIR/tls.crt and DIR/tls.key",
    )
    parser.add_argument(
        "--policies", metavar="DIR", help="CRL ConfigMap files (default: watch kube-public)"
    )
    parser.add_argument(
        "--policies-poll",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="with --policies: check the files for changes this often; 0 loads them once "
        "(default: %(default)s)",
    )
    parser.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster)")
    parser.add_argument(
        "--register-url",
        metavar="https://HOST:PORT",
        help="with --self-signed: register this server with the cluster of --kubeconfig (the "
        "Helm chart's webhook configurations, calling URL/mutate and URL/validate with the run's "
        "CA; HOST must be this machine as the API server reaches it) and delete them on exit: "
        "try the webhook on a cluster without building an image",
    )
    parser.add_argument(
        "--register-name",
        default="gpu-webhook-try",
        metavar="NAME",
        help="with --register-url: the configurations' name; one left by an earlier run is "
        "replaced (default: %(default)s)",
    )
    parser.add_argument(
        "--audit-interval",
        type=_audit_interval,
        default=0.0,
        metavar="SECONDS",
        help="audit the cluster's Pods and workloads against the policies in force this often, "
        "in the background, and publish policy reports (default: 0 = off)",
    )
    parser.add_argument(
        "--audit-reports",
        choices=("wgpolicyk8s", "openreports", "none"),
        default="wgpolicyk8s",
        help="the audit's report format: wgpolicyk8s.io/v1alpha2 PolicyReport, "
        "openreports.io/v1alpha1 Report, or none (metrics and /audit only; default: "
        "%(default)s)",
    )
    parser.add_argument(
        "--report-owner",
        metavar="NAME",
        help="the installation the audit's reports belong to: their name and the "
        "gpu-admission-webhook/report-owner label; only reports with that label are replaced "
        "or deleted (default: gpu-admission-webhook; required with --policies, so a run of "
        "proposed policies never replaces the production reports; the chart passes its release)",
    )
    parser.add_argument(
        "--audit-lease",
        metavar="NAMESPACE/NAME",
        help="with several replicas: the coordination.k8s.io Lease the one that audits holds "
        "(default: none, every replica audits)",
    )
    parser.add_argument(
        "--audit-identity",
        default=socket.gethostname(),
        metavar="NAME",
        help="this replica's name in the audit lease (default: the host name, a pod's name)",
    )
    add_registry_arguments(parser)
    parser.add_argument("--config", metavar="FILE", help="webhook config YAML")
    parser.add_argument(
        "--log-format",
        choices=("json", "text"),
        default="json",
        help="one JSON object per line, or key=value text lines (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="the least severe level logged (default: %(default)s)",
    )


def _number_in(text: str, parse: type[int] | type[float], low: float, high: float) -> float:
    """`text` parsed, within [low, high]; raises ValueError saying which rule it broke."""
    try:
        value = parse(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not low <= value <= high:
        raise ValueError(f"{text} is out of range: use {low:g}-{high:g}")
    return value


def _port(text: str) -> int:
    try:
        return int(_number_in(text, int, 1, 65535))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a TCP port: {exc}") from None


def _max_connections(text: str) -> int:
    try:
        return int(_number_in(text, int, 1, 100_000))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a connection count: {exc}") from None


def _port_or_off(text: str) -> int:
    return 0 if text.strip() == "0" else _port(text)


def _cache_mib(text: str) -> float:
    try:
        return _number_in(text, float, 0, 4096)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a cache size in MiB (0: off): {exc}") from None


def _ready_timeout(text: str) -> float:
    try:
        return _number_in(text, float, 0, 3600)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a timeout in seconds: {exc}") from None


def _drain(text: str) -> float:
    try:
        return _number_in(text, float, 0, 300)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a drain delay in seconds: {exc}") from None


def _audit_interval(text: str) -> float:
    try:
        value = _number_in(text, float, 0, 7 * 24 * 3600)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an audit interval in seconds: {exc}") from None
    if 0 < value < 60:
        # Each audit lists every Pod: a shorter period is API load, not freshness.
        raise argparse.ArgumentTypeError(
            f"not an audit interval in seconds: {text} is below 60 (use 0 to switch it off)"
        )
    return value


def _audit_tasks(
    args: argparse.Namespace, store: PolicyStore, config: WebhookConfig
) -> list[PolicySource]:
    """The periodic audit (SPEC §6), when switched on: its own client (in-cluster, or
    --kubeconfig), also with --policies (the cluster is then audited against the files)."""
    if not args.audit_interval:
        return []
    from webhook.sources.auditor import Auditor  # noqa: PLC0415 - kubernetes client: ~13 MiB
    from webhook.sources.lease import AuditLease  # noqa: PLC0415

    reports = None if args.audit_reports == "none" else args.audit_reports
    owner = args.report_owner
    if owner is None and args.policies and reports is not None:
        # The cluster's installation owns the default: files are proposals, named on purpose.
        raise ValueError(
            "--policies with --audit-interval publishes policy reports: pass --report-owner NAME "
            "(not the production installation's) or --audit-reports none"
        )
    lease = None
    if args.audit_lease:
        namespace, _, name = args.audit_lease.partition("/")
        if not namespace or not name:
            raise ValueError(f"--audit-lease {args.audit_lease!r}: use NAMESPACE/NAME")
        lease = AuditLease(namespace, name, args.audit_identity, args.audit_interval)
    auditor = Auditor(
        store,
        config,
        interval=args.audit_interval,
        report_format=reports,
        kubeconfig=args.kubeconfig,
        lease=lease,
        report_owner=owner or DEFAULT_OWNER,
    )
    return [auditor.run]


def _tls_files(args: argparse.Namespace, scratch: Path | None) -> tuple[Path, Path]:
    """Where the serving pair is, generating it for --self-signed; raises ValueError.

    `scratch` is the throwaway directory for --self-signed without --cert-dir (the caller
    removes it, CA key included, however the process ends).
    """
    if args.self_signed:
        cert_dir = Path(args.cert_dir) if args.cert_dir else scratch
        assert cert_dir is not None
        ips = ["127.0.0.1", "::1"]
        names = ["localhost"]
        hosts = [args.host, urlsplit(args.register_url).hostname if args.register_url else None]
        for host in hosts:
            if host in (None, "0.0.0.0", "::", "", *names, *ips):
                continue
            try:
                ips.append(str(ipaddress.ip_address(host)))
            except ValueError:
                names.append(host)
        try:
            paths = write_certificates(cert_dir, names, ips)
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"cannot write a self-signed certificate into {cert_dir}: {exc}"
            ) from exc
        print(f"CA certificate: {paths.ca_cert} (curl --cacert {paths.ca_cert} ...)", flush=True)
        args.ca_file = paths.ca_cert
        return paths.cert, paths.key
    if args.tls_cert and args.tls_key:
        return Path(args.tls_cert), Path(args.tls_key)
    if args.tls_cert or args.tls_key:
        raise ValueError("--tls-cert and --tls-key must be given together")
    if args.cert_dir:
        return Path(args.cert_dir) / "tls.crt", Path(args.cert_dir) / "tls.key"
    raise ValueError(
        "no serving certificate: pass --tls-cert FILE --tls-key FILE, --cert-dir DIR "
        "(from `gpu-webhook certs`), or --self-signed for a local run"
    )


def _policy_source(
    args: argparse.Namespace, store: PolicyStore, config: WebhookConfig
) -> PolicySource | None:
    """Load file policies now (a bad directory fails the start), or prepare the cluster watches.

    In a cluster: the CRL ConfigMaps, and unless switched off in the config the node inventory
    and the DRA claim cache (templates and claims), and the image table ConfigMap when the
    config names one, each a reflector; only the first gates readiness.
    """
    if args.policies:
        # webhook.sources.files imports no kubernetes client (~13 MiB RSS) for a process that never
        # talks to a cluster.
        files = FileSource(Path(args.policies), interval=args.policies_poll)
        store.replace(files.load())
        if args.policies_poll <= 0:
            return None
        return functools.partial(files.run, store)
    # Imported here for the same reason: only the in-cluster mode needs the kubernetes client.
    from webhook.sources.claims import claim_sources  # noqa: PLC0415
    from webhook.sources.nodes import inventory_sources  # noqa: PLC0415
    from webhook.sources.policies import ConfigMapWatcher  # noqa: PLC0415
    from webhook.sources.reflector import Reflector  # noqa: PLC0415

    reflectors: list[Reflector[Any]] = [ConfigMapWatcher(store, kubeconfig=args.kubeconfig)]
    if config.node_inventory:
        reflectors.extend(inventory_sources(store, config, kubeconfig=args.kubeconfig))
    if config.claim_template_cache:
        reflectors.extend(claim_sources(store, kubeconfig=args.kubeconfig))
    if config.runtime_fixes.namespace_levels and config.runtime_fixes.rdma.enabled:
        from webhook.sources.namespaces import NamespaceLevelSource  # noqa: PLC0415

        reflectors.append(NamespaceLevelSource(store, kubeconfig=args.kubeconfig))
    if config.image_cuda_table_config_map is not None:
        from webhook.sources.image_table import ImageTableSource  # noqa: PLC0415

        reflectors.append(ImageTableSource(store, config, kubeconfig=args.kubeconfig))

    async def watch_cluster() -> None:
        # Each reflector retries on its own and never raises; cancelling cancels them all.
        async with asyncio.TaskGroup() as group:
            for reflector in reflectors:
                group.create_task(reflector.run())

    return watch_cluster


def _image_resolver(args: argparse.Namespace, config: WebhookConfig) -> ImageResolver | None:
    """Registry lookups of images' CUDA versions (SPEC §4 step 6), unless the config turns
    them off; a bad --registry-auth or --registry-ca fails the start."""
    if not config.registry_lookups.enabled:
        if args.registry_auth or args.registry_ca:
            log.warning("registryLookups.enabled is false: --registry-auth/--registry-ca unused")
        return None
    return ImageResolver(registry_client(args, config), config.registry_lookups)


def serve_command(args: argparse.Namespace) -> int:
    """`gpu-webhook serve`: 0 after a clean shutdown, 2 when the setup is unusable."""
    if args.self_signed and not args.cert_dir:
        # A throwaway CA's key must not outlive the run, whether start-up fails or not.
        with tempfile.TemporaryDirectory(prefix="gpu-webhook-") as scratch:
            return _serve(args, Path(scratch))
    return _serve(args, None)


def _serve(args: argparse.Namespace, scratch: Path | None) -> int:
    log_handler = configure_logging(args.log_format, args.log_level)
    try:
        if args.register_url:
            args.register_url = _registration_url(args)
        config = load_config(Path(args.config) if args.config else None)
        cert_file, key_file = _tls_files(args, scratch)
        reloader = CertReloader(cert_file, key_file)
        store = PolicyStore()
        source = _policy_source(args, store, config)
        images = _image_resolver(args, config)
        tasks = _audit_tasks(args, store, config)
    except (ConfigError, ManifestError, ValueError, CommandError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.register_url:
        return _run(args, config, store, reloader, source, images, tasks, log_handler)
    from webhook.sources import registration  # noqa: PLC0415 - kubernetes client: ~13 MiB

    try:
        # Before serving: an unreadable kubeconfig or an unreachable API server ends the run
        # at once, with nothing registered.
        asyncio.run(registration.server_version(args.kubeconfig))
    except registration.RegistrationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Registered only once the port accepts connections: a registration that came first would
    # have the API server call a webhook not yet listening (the Pod entry's failurePolicy is
    # Fail: pods refused for that moment).
    registering = _Registering(args)
    worker = threading.Thread(target=registering.run, name="register", daemon=True)
    worker.start()
    code = 2
    try:
        code = _run(args, config, store, reloader, source, images, tasks, log_handler)
    finally:
        registering.stopping.set()
        worker.join()
        # However the server ended (Ctrl-C, SIGTERM, an error): the API server must not keep
        # calling a webhook that is gone.
        if registering.made and not _unregistered(args):
            code = 2
    return 2 if registering.failed else code


def _unregistered(args: argparse.Namespace) -> bool:
    """Delete both configurations, saying so; False (and how to do it by hand) on failure."""
    from webhook.sources import registration  # noqa: PLC0415

    try:
        lines = asyncio.run(registration.unregister(args.kubeconfig, args.register_name))
    except registration.RegistrationError as exc:
        print(
            f"error: {exc}; remove them by hand: kubectl delete "
            f"mutatingwebhookconfiguration,validatingwebhookconfiguration {args.register_name}",
            file=sys.stderr,
            flush=True,
        )
        return False
    print("; ".join(lines), flush=True)
    return True


class _Registering:
    """Registers the server once its port accepts connections (in a thread of its own, with
    its own event loop); on failure says why and stops the server (SIGTERM to this process)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stopping = threading.Event()
        self.failed = False
        self.made = False  # whether a configuration of ours may exist (to delete at the end)

    def _listening(self) -> bool:
        host = "::1" if self.args.host == "::" else self.args.host
        host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        try:
            with socket.create_connection((host, self.args.port), timeout=1):
                return True
        except OSError:
            return False

    def run(self) -> None:
        from webhook.sources import registration  # noqa: PLC0415

        while not self._listening():
            if self.stopping.wait(0.1):
                return  # the server ended before it listened: nothing to register
        args = self.args
        try:
            registered = asyncio.run(
                registration.register(
                    args.kubeconfig,
                    args.register_name,
                    args.register_url,
                    args.ca_file.read_bytes(),
                )
            )
        except (registration.RegistrationError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            self.failed = True
            self.made = isinstance(exc, registration.RegistrationError) and exc.made > 0
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self.made = True
        _print_registered(args, registered)


def _registration_url(args: argparse.Namespace) -> str:
    """--register-url checked against the other options; raises ValueError."""
    from webhook.sources.registration import check_name, check_url  # noqa: PLC0415

    url = check_url(args.register_url)
    check_name(args.register_name)
    if not args.self_signed:
        raise ValueError(
            "--register-url needs --self-signed: the registration carries the CA of the "
            "certificate this run generates (with your own certificate, use the Helm chart)"
        )
    port = urlsplit(url).port or 443
    if port != args.port:
        print(
            f"note: --register-url names port {port}, the server listens on {args.port} (fine "
            "only behind a port forward)",
            flush=True,
        )
    return url


def _print_registered(args: argparse.Namespace, registered: Registered) -> None:
    """What was registered, how to try it, and how it ends."""
    print(
        f"registered with the API server at {registered.server} ({registered.version}): "
        + "; ".join(registered.lines),
        flush=True,
    )
    print(
        f"  {registered.webhooks} webhooks with the Helm chart's rules call "
        f"{args.register_url}/mutate and {args.register_url}/validate; the API server must "
        "reach that address",
        flush=True,
    )
    print(
        "try it: kubectl create namespace ml; kubectl apply --dry-run=server -f "
        "examples/pods.yaml "
        "(warnings and denials; nothing is created)",
        flush=True,
    )
    print("Ctrl-C stops the webhook and deletes both configurations.", flush=True)


def _run(
    args: argparse.Namespace,
    config: WebhookConfig,
    store: PolicyStore,
    reloader: CertReloader,
    source: PolicySource | None,
    images: ImageResolver | None,
    tasks: list[PolicySource],
    log_handler: BatchedStreamHandler,
) -> int:
    """Serve until a signal: 0 after a clean shutdown, 2 when the port cannot be served."""
    codec = json_codec(prefer_orjson=not os.environ.get("GPU_WEBHOOK_DISABLE_ORJSON"))
    app = create_app(
        config,
        store,
        codec=codec,
        cert_reloader=reloader,
        policy_source=source,
        tasks=tasks,
        review_sink=functools.partial(log_handler.write, review_log, "review"),
        images=images,
        ready_timeout=args.ready_timeout,
        decision_cache_bytes=int(args.decision_cache_mib * 1024 * 1024),
    )
    # Everything built so far (modules, the kubernetes client, the config) lives as long as the
    # process: out of the collector's full passes, which otherwise scan it all each time the
    # objects of requests and of the audit's list pages reach the oldest generation. Measured
    # with bench/bench_audit.py (10,000 pods): the audit held the event loop at most 107 ms of
    # CPU without this, 30 ms with it, and used 5.3 s of CPU instead of 3.4 s.
    # Read and index the shipped image knowledge now (~0.1 s), not on the first GPU review or
    # in the middle of the first audit, and before the freeze so it is frozen too.
    _ = config.image_rules
    gc.collect()
    gc.freeze()
    # A review's parsed body and evaluation hold a few thousand container objects at once, and
    # CPython's youngest generation is collected each time 700 more are alive than freed
    # (gc.get_threshold() (700, 10, 10)): several collections per review, each walking the
    # review's live objects, which reference counting frees anyway when it is answered. A larger
    # first threshold collects once per several reviews instead (bench/bench_server.py, distinct
    # mix: 4-8 % less server CPU per review in one A/B, within the noise in a later one; RSS after
    # 100,000 reviews 71.4 MiB); the collector still runs, so cycles are freed.
    gc.set_threshold(20_000, 20, 20)
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(serve_app(app, args, reloader, log_handler))
    except OSError as exc:
        print(f"error: cannot serve: {exc}", file=sys.stderr)
        return 2
    return 0
