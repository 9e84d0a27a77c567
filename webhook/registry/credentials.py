"""Registry credentials from a dockerconfigjson file (`--registry-auth`; in a cluster, a mounted
Secret of type kubernetes.io/dockerconfigjson), matched to registries as the kubelet does.

`{"auths": {KEY: {"auth": base64("user:password")} | {"username": ..., "password": ...}
| {"identitytoken": ...}}}`. An `identitytoken` is an OAuth2 refresh token the registry's
token service issued at login (nerdctl's login.go: `authConfig.Password = ""` then
`authConfig.IdentityToken = responseIdentityToken`, as docker's). Clients reading a docker
config built on containerd's resolver use it before anything else (nerdctl login.go and
others: `if auth.IdentityToken != "" { return "", auth.IdentityToken, nil }`); it is exchanged
for a bearer token with the OAuth2 POST (webhook.registry.auth). The kubelet's own keyring
reads only auth/username/password (pkg/credentialprovider/config.go dockerConfigEntryWithAuth).
A `registrytoken` is a bearer token for the registry itself: sent as it is, with no token
service asked, and before any other secret of the entry, as the Docker engine does (moby
distribution/registry.go: `if authConfig.RegistryToken != ""` -> existingTokenHandler, which
sets `Authorization: Bearer <token>` on the registry's bearer challenge). containerd's CRI
ParseAuth has a TODO for it.
KEY is a host (`nvcr.io`, `registry:5000`), optionally with a scheme and a path
(`https://index.docker.io/v1/` is Docker Hub's, as `docker login` writes it), or a host and a
repository prefix (`quay.io/team`): the most specific key matching an image wins
(k8s.io/kubernetes pkg/credentialprovider/keyring.go: keys parsed as URLs, the index
reverse-sorted so `quay.io/team` is tried before `quay.io`).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.registry.reference import DOCKER_HUB, DOCKER_HUB_ENDPOINT

log = logging.getLogger(__name__)

# `docker login` without a server writes Docker Hub's credentials under its legacy index URL.
_HUB_ALIASES = frozenset({"index.docker.io", DOCKER_HUB_ENDPOINT, DOCKER_HUB})
MAX_AUTH_FILE_BYTES = 1024 * 1024


class CredentialsError(ValueError):
    """The --registry-auth file cannot be used (the message says why)."""


@dataclass(frozen=True, slots=True)
class Credential:
    username: str
    password: str = field(repr=False)
    # An OAuth2 refresh token (dockerconfigjson `identitytoken`): when set, the only secret used.
    identity_token: str = field(default="", repr=False)
    # A bearer token for the registry (dockerconfigjson `registrytoken`): sent as it is.
    registry_token: str = field(default="", repr=False)


def _registry_key(key: str) -> tuple[str, str]:
    """`https://index.docker.io/v1/` -> ("docker.io", ""); `quay.io/team` -> ("quay.io", "team")."""
    text = key.strip()
    for scheme in ("https://", "http://"):
        if text.lower().startswith(scheme):
            text = text[len(scheme) :]
    host, _, path = text.partition("/")
    host = host.lower()
    if host in _HUB_ALIASES:
        host = DOCKER_HUB
    path = path.strip("/")
    if host == DOCKER_HUB and path in ("v1", "v2"):
        path = ""
    return host, path


def _credential(key: str, entry: Any, where: str) -> Credential | None:
    if not isinstance(entry, Mapping):
        raise CredentialsError(f"{where}: auths[{key!r}] must be an object")
    registry_token = entry.get("registrytoken")
    if registry_token is not None and not isinstance(registry_token, str):
        raise CredentialsError(f"{where}: auths[{key!r}].registrytoken must be a string")
    if registry_token:
        return Credential("", "", registry_token=registry_token)
    token = entry.get("identitytoken")
    if token is not None and not isinstance(token, str):
        raise CredentialsError(f"{where}: auths[{key!r}].identitytoken must be a string")
    if token:
        # The username is not sent with it (containerd: `return "", auth.IdentityToken`).
        return Credential("", "", token)
    auth = entry.get("auth")
    if isinstance(auth, str) and auth:
        try:
            decoded = base64.b64decode(auth, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise CredentialsError(
                f"{where}: auths[{key!r}].auth is not base64 of user:password"
            ) from None
        user, sep, password = decoded.partition(":")
        if not sep:
            raise CredentialsError(f"{where}: auths[{key!r}].auth is not base64 of user:password")
        return Credential(user, password)
    name, secret = entry.get("username"), entry.get("password")
    if isinstance(name, str) and isinstance(secret, str) and name:
        return Credential(name, secret)
    log.warning(
        "%s: auths[%r] has no auth, username/password, identitytoken nor registrytoken; ignored",
        where,
        key,
    )
    return None


@dataclass(frozen=True)
class Keyring:
    """(registry, repository prefix) -> credential, most specific first."""

    entries: tuple[tuple[str, str, Credential], ...] = ()

    @property
    def registries(self) -> frozenset[str]:
        """Registries the file names: lookups to them are allowed (SPEC §4 step 6)."""
        return frozenset(registry for registry, _, _ in self.entries)

    def lookup(self, registry: str, repository: str) -> Credential | None:
        for host, prefix, credential in self.entries:
            if host == registry and (
                not prefix or repository == prefix or repository.startswith(prefix + "/")
            ):
                return credential
        return None

    @classmethod
    def parse(cls, text: str, where: str) -> Keyring:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise CredentialsError(f"{where} is not JSON: {exc}") from None
        auths = data.get("auths") if isinstance(data, Mapping) else None
        if not isinstance(auths, Mapping):
            raise CredentialsError(
                f'{where} has no "auths" object: pass a dockerconfigjson file, e.g. the '
                "`.dockerconfigjson` key of a kubernetes.io/dockerconfigjson Secret"
            )
        entries = []
        for key, entry in auths.items():
            credential = _credential(str(key), entry, where)
            if credential is not None:
                host, prefix = _registry_key(str(key))
                entries.append((host, prefix, credential))
        # Longest prefix first: `quay.io/team/x` before `quay.io/team` before `quay.io`.
        entries.sort(key=lambda e: (e[0], len(e[1])), reverse=True)
        return cls(tuple(entries))


class AuthFile:
    """The --registry-auth file, read again when it changes (a mounted Secret is updated in
    place by the kubelet); a file that turns unreadable keeps the last good credentials."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._signature: tuple[int, int] | None = None
        self._keyring = self._read()

    def _read(self) -> Keyring:
        try:
            stat = self.path.stat()
            if stat.st_size > MAX_AUTH_FILE_BYTES:
                raise CredentialsError(f"{self.path} is larger than 1 MiB; not a docker config")
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CredentialsError(f"cannot read {self.path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise CredentialsError(f"{self.path} is not a text file") from None
        self._signature = (stat.st_mtime_ns, stat.st_size)
        return Keyring.parse(text, str(self.path))

    @property
    def keyring(self) -> Keyring:
        try:
            stat = os.stat(self.path)
            signature = (stat.st_mtime_ns, stat.st_size)
            if signature != self._signature:
                # Set first: a broken version is reported once, not at every lookup.
                self._signature = signature
                self._keyring = self._read()
        except (OSError, CredentialsError) as exc:
            log.warning("registry credentials: %s; keeping the last ones read", exc)
        return self._keyring
