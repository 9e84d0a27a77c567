"""Exception tree: every message says what was found, what was expected and where."""

from __future__ import annotations


class WebhookError(Exception):
    """Base class for every error the webhook raises on purpose."""


class ConfigError(WebhookError):
    """The webhook's own configuration file is unreadable or invalid."""


class ManifestError(WebhookError):
    """A manifest or ConfigMap file could not be read or parsed."""


class QuantityError(WebhookError, ValueError):
    """A string is not a valid Kubernetes resource quantity."""


class QuantityRangeError(QuantityError):
    """A valid Kubernetes quantity too large for the webhook to evaluate (10^4000 or more)."""


class ObjectShapeError(WebhookError):
    """An admitted object does not have the shape its kind requires (e.g. containers not a list)."""
