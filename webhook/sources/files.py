"""Policy source for local runs: a directory (or one file) of CRL ConfigMap manifests, polled.

It imports no Kubernetes client, so `gpu-webhook serve --policies DIR` stays small.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from webhook.core.base.errors import ManifestError
from webhook.core.base.manifests import parse_documents
from webhook.core.policies.policyset import PolicySet
from webhook.sources.store import PolicyStore, log_policy_changes

log = logging.getLogger(__name__)


def read_documents(path: Path) -> list[Any]:
    """Every YAML/JSON document in a file; raises ManifestError with the file and reason."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise ManifestError(
            f"cannot read {path}: not UTF-8 text (byte 0x{byte:02x} at offset {exc.start}); "
            "a manifest is YAML or JSON"
        ) from exc
    except OSError as exc:
        raise ManifestError(f"cannot read {path}: {exc}") from exc
    return parse_documents(text, str(path))


def policy_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ManifestError(f"{path} is neither a file nor a directory")
    return sorted(p for p in path.iterdir() if p.suffix in {".yaml", ".yml", ".json"})


def load_policy_dir(path: Path) -> PolicySet:
    """Policies from a directory (or one file) of ConfigMap manifests: the file source."""
    configmaps = [
        doc
        for file in policy_files(path)
        for doc in read_documents(file)
        if isinstance(doc, Mapping) and doc.get("kind") == "ConfigMap"
    ]
    return PolicySet.from_configmaps(configmaps)


class FileSource:
    """Policies from a directory (or one file) of ConfigMap manifests, reloaded when it changes."""

    # Every Nth poll hashes the contents even when no file's metadata changed, for rewrites
    # faster than the filesystem's timestamp granularity.
    FULL_CHECK_EVERY = 15

    def __init__(self, path: Path, *, interval: float = 2.0) -> None:
        self.path = path
        self.interval = interval
        self._fingerprint: str | None = None
        self._signature: tuple[tuple[str | int, ...], ...] | None = None

    def load(self) -> PolicySet:
        """Read every policy file now and log the result; raises ManifestError naming the file."""
        policies = self._read()
        log_policy_changes(None, policies, str(self.path))
        return policies

    def _read(self) -> PolicySet:
        self._signature = self._stat_signature()
        fingerprint = self._take_fingerprint()
        policies = load_policy_dir(self.path)
        self._fingerprint = fingerprint
        return policies

    def _stat_signature(self) -> tuple[tuple[str | int, ...], ...]:
        """Names, sizes, inodes and timestamps of the policy files: no reads, no thread."""
        try:
            return tuple(
                (file.name, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
                for file in policy_files(self.path)
                for st in (file.stat(),)
            )
        except (ManifestError, OSError) as exc:
            return ((f"unreadable: {exc}",),)

    def _take_fingerprint(self) -> str:
        # Content hashes rather than mtimes: a quick rewrite within the filesystem's timestamp
        # granularity still counts as a change, and policy directories are small.
        digest = hashlib.sha256()
        try:
            for file in policy_files(self.path):
                digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
        except (ManifestError, OSError) as exc:
            digest.update(f"unreadable: {exc}".encode())
        return digest.hexdigest()

    async def run(self, store: PolicyStore) -> None:
        """Poll until cancelled; replace the snapshot when the files change, keep it on errors."""
        if not store.ready:
            await self._reload(store)
        polls = 0
        while True:
            await asyncio.sleep(self.interval)
            polls += 1
            # The stat check runs on the event loop (microseconds per file). Handing every poll
            # to a thread made the admission loop and the thread trade the GIL back and forth,
            # which showed up as 15-45 ms latency spikes under load (bench/bench_server.py).
            signature = self._stat_signature()
            if signature == self._signature and polls % self.FULL_CHECK_EVERY:
                continue
            self._signature = signature
            fingerprint = await asyncio.to_thread(self._take_fingerprint)
            if fingerprint != self._fingerprint:
                await self._reload(store)

    async def _reload(self, store: PolicyStore) -> None:
        try:
            policies = await asyncio.to_thread(self._read)
        except ManifestError as exc:
            # Remember the broken state so it is reported once, not on every poll.
            self._fingerprint = await asyncio.to_thread(self._take_fingerprint)
            store.stats.errors += 1
            store.stats.last_error = f"cannot reload policies from {self.path}: {exc}"
            store.stats.source_error = store.stats.last_error
            state = "keeping the policies loaded before" if store.ready else "not ready yet"
            log.error("%s; %s", store.stats.last_error, state)
            return
        old = store.current if store.ready else None
        store.stats.source_error = None
        store.replace(policies)
        log_policy_changes(old, policies, str(self.path))
