"""Registry authorization: a 401's challenge answered with a Bearer token or Basic credentials.

Auth as containerd's remotes/docker does it (authorizer.go, auth/fetch.go): try the request;
on a 401 read the WWW-Authenticate challenge; for `Bearer`, GET a token from its realm with
its service and scope (the token spec's GET form, with Basic credentials when there are some)
and retry; for `Basic`, retry with the credentials. A credential that is an `identitytoken`
(an OAuth2 refresh token) is exchanged at the realm with the OAuth2 POST instead
(distribution docs/spec/auth/oauth.md "Example refreshing an Access Token": form
grant_type=refresh_token, refresh_token, service, client_id, scope; answer `access_token`),
as containerd's doBearerAuth does (FetchTokenWithOAuth when a secret is set), falling back to
the GET form with that secret only where containerd does (POST answered 400, 401 or 404).

Credentials go only to their own registry and to a token realm of the same site (see
`realm_may_get_credentials`) or one the admin listed; a realm elsewhere is asked anonymously.
The headers made here are kept by registry/http.py.
"""

from __future__ import annotations

import base64
import re
import time
from typing import Any

from yarl import URL

from webhook.registry.challenge import Challenge
from webhook.registry.credentials import Credential
from webhook.registry.documents import parse
from webhook.registry.guard import ip_literal
from webhook.registry.reference import ImageRef
from webhook.registry.results import INVALID, UNAUTHORIZED, UNREACHABLE, LookupFailure
from webhook.registry.transport import Transport, read_limited

MAX_TOKEN_BYTES = 1024 * 1024
DEFAULT_TOKEN_SECONDS = 60  # the token spec's default when expires_in is absent
# A token is reused at most this long, whatever its expires_in says.
MAX_TOKEN_SECONDS = 3600
# How long a Basic header (or an auth file's registrytoken) is reused without a new challenge.
CREDENTIAL_SECONDS = 300
# A bearer token as RFC 6750 writes it (b64token), leniently: visible ASCII, no space, so it
# can never carry a line break into a header.
_TOKEN = re.compile(r"[\x21-\x7e]+")
# Realms on another host of a two-label site that the public defaults need (Docker Hub's token
# service: the WWW-Authenticate of registry-1.docker.io names https://auth.docker.io/token).
_KNOWN_REALMS = {"registry-1.docker.io": frozenset({"auth.docker.io"})}
# The OAuth2 client_id: "does not need to be registered [...] but should be set to a meaningful
# value in order to allow auditing" (distribution docs/spec/auth/oauth.md).
CLIENT_ID = "gpu-admission-webhook"
# containerd authorizer.go doBearerAuth: "Registries without support for POST may return 404
# [GCR] ... 401 [Artifactory] ... 400 [ACR]": then the GET form (405 only with a username).
_POST_FALLBACK = frozenset({400, 401, 404})


def _later(seconds: float) -> float:
    return time.monotonic() + seconds


def realm_may_get_credentials(realm: str, registry: str) -> bool:
    """Whether a token realm on host `realm` is the registry's own site (`registry` is the
    registry's host, without its port).

    Without the public suffix list a two-label parent cannot be told apart from a public
    suffix (`docker.io` from `co.uk`), so the rule is conservative: the registry's own host;
    Docker Hub's auth.docker.io; or the registry's parent domain (its host without the first
    label) and hosts below it when that parent has at least three labels — `auth.corp.example.com`
    for `registry.corp.example.com`, never `evil.co.uk` for `example.co.uk` (whose parent is
    `co.uk`), nor any `*.amazonaws.com` for an ECR registry beyond its own regional endpoint.
    Any other realm gets credentials only when the admin lists its host (allowedRegistries)."""
    realm, registry = realm.strip("[]").lower(), registry.strip("[]").lower()
    if realm == registry:
        return True
    if ip_literal(realm) or ip_literal(registry):
        return False
    if realm in _KNOWN_REALMS.get(registry, ()):
        return True
    parent = registry.partition(".")[2]
    return parent.count(".") >= 2 and (realm == parent or realm.endswith("." + parent))


def basic(credential: Credential) -> str:
    """Basic user:password; for an identity token, ":token" (containerd FetchToken:
    SetBasicAuth(to.Username, to.Secret) with the username empty)."""
    if credential.identity_token:
        raw = f":{credential.identity_token}".encode()
    else:
        raw = f"{credential.username}:{credential.password}".encode()
    return "Basic " + base64.b64encode(raw).decode("ascii")


async def authorize(
    transport: Transport, challenges: list[Challenge], ref: ImageRef, credential: Credential | None
) -> tuple[str, float]:
    """The Authorization header answering `challenges`, and its monotonic expiry."""
    for challenge in challenges:
        if challenge.scheme == "bearer":
            if credential is not None and credential.registry_token:
                # moby existingTokenHandler: the token as it is, no token service asked.
                if not _TOKEN.fullmatch(credential.registry_token):
                    raise LookupFailure(
                        UNAUTHORIZED, "the --registry-auth registrytoken is not a token"
                    )
                return f"Bearer {credential.registry_token}", _later(CREDENTIAL_SECONDS)
            return await _token(transport, challenge, ref, credential)
        if challenge.scheme == "basic" and credential is not None:
            # Only a token, no password: containerd doBasicAuth "missing username or secret".
            token = (
                "a registrytoken"
                if credential.registry_token
                else "an identitytoken"
                if credential.identity_token
                else ""
            )
            if token:
                raise LookupFailure(
                    UNAUTHORIZED,
                    f"the registry asks for a password; its --registry-auth entry has only {token}",
                )
            return basic(credential), _later(CREDENTIAL_SECONDS)
    raise denied(401, ref, credential)


async def _token(
    transport: Transport, challenge: Challenge, ref: ImageRef, credential: Credential | None
) -> tuple[str, float]:
    realm = challenge.params.get("realm", "")
    try:
        url = URL(realm)
    except ValueError:
        url = URL()
    host = url.host or ""
    if not url.is_absolute() or not (
        url.scheme == "https" or (url.scheme == "http" and transport.policy.insecure(host))
    ):
        raise LookupFailure(INVALID, "the registry sent an unusable token realm")
    service = challenge.params.get("service", "")
    scopes = challenge.params.get("scope", "").split() or [f"repository:{ref.repository}:pull"]
    query = [("service", service)] if service else []
    query += [("scope", scope) for scope in scopes]
    # Credentials (an identity token too) only to a realm of the registry's own site or a
    # listed host; elsewhere the realm is asked anonymously, with the GET form.
    same_site = realm_may_get_credentials(host, ref.hostname) or transport.policy.listed(host)
    secret = credential if credential is not None and same_site else None
    started = time.monotonic()
    resp = None
    if secret is not None and secret.identity_token:
        form = {
            "grant_type": "refresh_token",
            "refresh_token": secret.identity_token,
            "service": service,
            "client_id": CLIENT_ID,
            "scope": " ".join(scopes),
        }
        resp = await transport.request(url, {}, None, "token realm", form)
        if resp.status in _POST_FALLBACK:
            resp.release()
            resp = None
    if resp is None:
        authorization = basic(secret) if secret is not None else None
        resp = await transport.request(url.update_query(query), {}, authorization, "token realm")
    async with resp:
        if resp.status in (401, 403):
            raise denied(resp.status, ref, credential)
        if resp.status != 200:
            raise LookupFailure(
                UNREACHABLE,
                f"the token service answered {resp.status} {(resp.reason or '')[:40]}",
            )
        body = await read_limited(resp, MAX_TOKEN_BYTES, "token")
    # Bounded by structure like every registry document (small: parsed here, on the loop).
    try:
        data: dict[str, Any] | None = parse(body, "token answer")
    except LookupFailure as failure:
        if not failure.detail.endswith("is not a JSON object"):
            raise
        data = None
    token = data.get("token") or data.get("access_token") if data is not None else None
    if not isinstance(token, str) or not token:
        raise LookupFailure(INVALID, "the token service sent no token")
    if not _TOKEN.fullmatch(token):
        raise LookupFailure(INVALID, "the token service sent no usable token")
    expires = data.get("expires_in") if data is not None else None
    seconds = expires if isinstance(expires, int) and expires > 0 else DEFAULT_TOKEN_SECONDS
    seconds = min(seconds, MAX_TOKEN_SECONDS)
    # Renewed a little early, so a token never expires between two requests of a lookup.
    return f"Bearer {token}", started + max(seconds - 5, 1)


def denied(status: int, ref: ImageRef, credential: Credential | None) -> LookupFailure:
    if credential is None:
        return LookupFailure(
            UNAUTHORIZED, f"{status} from the registry: add credentials for it to --registry-auth"
        )
    return LookupFailure(
        UNAUTHORIZED, f"the registry refused the --registry-auth credentials ({status})"
    )
