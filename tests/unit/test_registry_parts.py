"""Image references, dockerconfigjson credentials and WWW-Authenticate challenges, as the
registries and the kubelet read them."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from webhook.registry.auth import realm_may_get_credentials
from webhook.registry.challenge import parse_challenge, parse_challenges
from webhook.registry.credentials import AuthFile, Credential, CredentialsError, Keyring
from webhook.registry.reference import ImageRef, ReferenceError, parse_reference

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("image", "ref", "endpoint"),
    [
        ("ubuntu", ImageRef("docker.io", "library/ubuntu", "latest"), "registry-1.docker.io"),
        (
            "vllm/vllm-openai:v0.8.5",
            ImageRef("docker.io", "vllm/vllm-openai", "v0.8.5"),
            "registry-1.docker.io",
        ),
        (
            "docker.io/ubuntu:22.04",
            ImageRef("docker.io", "library/ubuntu", "22.04"),
            "registry-1.docker.io",
        ),
        (
            "index.docker.io/library/ubuntu",
            ImageRef("docker.io", "library/ubuntu", "latest"),
            "registry-1.docker.io",
        ),
        (
            "nvcr.io/nvidia/pytorch:24.05-py3",
            ImageRef("nvcr.io", "nvidia/pytorch", "24.05-py3"),
            "nvcr.io",
        ),
        ("localhost/app", ImageRef("localhost", "app", "latest"), "localhost"),
        (
            "registry:5000/team/app@" + DIGEST,
            ImageRef("registry:5000", "team/app", "", DIGEST),
            "registry:5000",
        ),
        ("Registry/app:1", ImageRef("registry", "app", "1"), "registry"),
        ("ghcr.io/x/y:1@" + DIGEST, ImageRef("ghcr.io", "x/y", "1", DIGEST), "ghcr.io"),
        ("[::1]:5000/app:1", ImageRef("[::1]:5000", "app", "1"), "[::1]:5000"),
    ],
)
def test_references_follow_distribution_reference(image: str, ref: ImageRef, endpoint: str) -> None:
    assert parse_reference(image) == ref
    assert ref.endpoint == endpoint


def test_canonical_and_reference() -> None:
    ref = parse_reference("ghcr.io/x/y:1@" + DIGEST)
    assert ref.reference == DIGEST
    assert ref.canonical() == f"ghcr.io/x/y@{DIGEST}"
    assert parse_reference("ubuntu").canonical() == "docker.io/library/ubuntu:latest"
    assert parse_reference("[::1]:5000/app").hostname == "::1"


@pytest.mark.parametrize(
    ("image", "message"),
    [
        ("", "the image is empty"),
        ("Ubuntu", "'Ubuntu' is not a valid repository name"),
        ("app:bad tag", "'bad tag' is not a valid tag"),
        ("app@sha256:abc", "'sha256:abc' is not a sha256 or sha512 digest"),
        ("x" * 2000, "the reference is longer than any valid image reference"),
    ],
)
def test_invalid_references_say_why(image: str, message: str) -> None:
    with pytest.raises(ReferenceError) as caught:
        parse_reference(image)
    assert str(caught.value) == message


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_keyring_keys_as_docker_login_writes_them() -> None:
    keyring = Keyring.parse(
        json.dumps(
            {
                "auths": {
                    "https://index.docker.io/v1/": {"auth": _b64("hub:pw1")},
                    "nvcr.io": {"username": "$oauthtoken", "password": "nvapi-x"},
                    "quay.io/team": {"auth": _b64("team:pw3")},
                    "quay.io": {"auth": _b64("any:pw4")},
                    "http://registry:5000": {"auth": _b64("local:pw5")},
                }
            }
        ),
        "config.json",
    )
    assert keyring.lookup("docker.io", "vllm/vllm-openai") == Credential("hub", "pw1")
    assert keyring.lookup("nvcr.io", "nvidia/pytorch") == Credential("$oauthtoken", "nvapi-x")
    assert keyring.lookup("quay.io", "team/app") == Credential("team", "pw3")
    assert keyring.lookup("quay.io", "teamx/app") == Credential("any", "pw4")
    assert keyring.lookup("registry:5000", "app") == Credential("local", "pw5")
    assert keyring.lookup("ghcr.io", "x/y") is None
    assert keyring.registries == {"docker.io", "nvcr.io", "quay.io", "registry:5000"}
    assert "pw1" not in repr(keyring)


def test_an_identity_token_is_the_credential_when_an_entry_has_one() -> None:
    keyring = Keyring.parse(
        json.dumps(
            {
                "auths": {
                    # As `docker login` writes it when the token service gave a refresh token:
                    # the password emptied, the token beside it.
                    "myreg.azurecr.io": {"auth": _b64("alice:"), "identitytoken": "rt-1"},
                    "harbor.corp": {"identitytoken": "rt-2"},
                    "quay.io": {"username": "bob", "password": "pw", "identitytoken": ""},
                    "ghcr.io": {"registrytoken": "bearer-only"},
                }
            }
        ),
        "config.json",
    )
    assert keyring.lookup("myreg.azurecr.io", "team/app") == Credential("", "", "rt-1")
    assert keyring.lookup("harbor.corp", "app") == Credential("", "", "rt-2")
    assert keyring.lookup("quay.io", "x/y") == Credential("bob", "pw")  # empty token: unused
    # A registry token is the bearer token itself (moby: used before any other secret).
    assert keyring.lookup("ghcr.io", "x/y") == Credential("", "", registry_token="bearer-only")
    assert "rt-1" not in repr(keyring)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"auths": {"x": {"identitytoken": 7}}}', "auths['x'].identitytoken must be a string"),
        ("{", "config.json is not JSON"),
        ('{"registry": {}}', 'config.json has no "auths" object'),
        ('{"auths": {"x": {"auth": "!!"}}}', "auths['x'].auth is not base64 of user:password"),
        ('{"auths": {"x": 3}}', "auths['x'] must be an object"),
    ],
)
def test_unusable_auth_files_say_why(text: str, message: str) -> None:
    with pytest.raises(CredentialsError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Keyring.parse(text, "config.json")


def test_auth_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"auths": {"a.example": {"auth": _b64("u:1")}}}))
    auth = AuthFile(path)
    assert auth.keyring.registries == {"a.example"}
    path.write_text(json.dumps({"auths": {"b.example": {"auth": _b64("u:2")}}}) + " ")
    assert auth.keyring.registries == {"b.example"}
    path.write_text("not json at all, and longer than before")
    assert auth.keyring.registries == {"b.example"}  # the last good one stays


def test_challenges_as_registries_send_them() -> None:
    hub = parse_challenge(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
        'scope="repository:library/ubuntu:pull"'
    )
    assert hub is not None and hub.scheme == "bearer"
    assert hub.params == {
        "realm": "https://auth.docker.io/token",
        "service": "registry.docker.io",
        "scope": "repository:library/ubuntu:pull",
    }
    quoted = parse_challenge(r'Bearer realm="https://x/t\"k", error=invalid_token')
    assert quoted is not None
    assert quoted.params == {"realm": 'https://x/t"k', "error": "invalid_token"}
    assert parse_challenge('Bearer realm="unterminated') == parse_challenge("Bearer")
    ordered = parse_challenges(['Basic realm="x"', "Negotiate", 'bearer realm="y"'])
    assert [c.scheme for c in ordered] == ["bearer", "basic"]


@pytest.mark.parametrize(
    ("realm", "registry"),
    [
        ("auth.docker.io", "registry-1.docker.io"),  # Docker Hub's token service
        ("nvcr.io", "nvcr.io"),
        ("ghcr.io", "ghcr.io"),
        ("auth.corp.example.com", "registry.corp.example.com"),
        ("corp.example.com", "registry.corp.example.com"),
        ("auth.example.co.uk", "registry.example.co.uk"),
        ("127.0.0.1", "127.0.0.1"),
    ],
)
def test_credentials_may_go_to_a_realm_of_the_registrys_own_site(realm: str, registry: str) -> None:
    assert realm_may_get_credentials(realm, registry)


@pytest.mark.parametrize(
    ("realm", "registry"),
    [
        ("evil.co.uk", "example.co.uk"),  # the last two labels are a public suffix here
        ("evil.docker.io", "docker.io"),
        ("token.evil.example", "registry.corp.example.com"),
        ("attacker.s3.amazonaws.com", "1234.dkr.ecr.us-east-1.amazonaws.com"),
        ("evil.amazonaws.com", "1234.dkr.ecr.us-east-1.amazonaws.com"),
        ("evil.io", "nvcr.io"),
        ("127.0.0.2", "127.0.0.1"),
        ("example.com", "registry.example.com"),  # a two-label parent: not trusted
    ],
)
def test_credentials_never_go_to_a_realm_of_another_site(realm: str, registry: str) -> None:
    assert not realm_may_get_credentials(realm, registry)
