"""A Kubernetes client acting as another user (impersonation), and the user the API server then
puts in an AdmissionReview's userInfo: the e2e and native tests of gpuAccess.annotationWriters."""

from __future__ import annotations

from typing import Any


def as_user(core: Any, username: str | None) -> tuple[Any, str, tuple[str, ...]]:
    """A CoreV1Api as `username` (impersonated, with the admins' group `system:masters` for
    RBAC: the test clusters run no Volcano and grant its ServiceAccount nothing; None: the test
    client itself), and the username and groups the API server authenticates it as
    (SelfSubjectReview)."""
    from kubernetes import client as _client

    client: Any = _client
    api = core.api_client
    if username is not None:
        api = client.ApiClient(core.api_client.configuration)
        api.set_default_header("Impersonate-User", username)
        api.set_default_header("Impersonate-Group", "system:masters")
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    user = review.status.user_info
    return client.CoreV1Api(api), user.username, tuple(user.groups or ())
