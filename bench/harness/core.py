"""The evaluation core's names the benchmarks use, imported in this one place (when the core's
modules move, only these lines change).

Importing this module imports the webhook: a benchmark that measures another build (bench_eval.py
with GPU_WEBHOOK_COMPILED) puts that build first on sys.path before it imports this.
"""

from webhook.core.config.model import WebhookConfig, load_config
from webhook.core.evaluation.evaluate import evaluate
from webhook.core.images.facts import ImageQuery
from webhook.core.placement.inventory import NodeInventory
from webhook.core.policies.crl import crl_configmap
from webhook.core.policies.policyset import PolicySet

__all__ = [
    "ImageQuery",
    "NodeInventory",
    "PolicySet",
    "WebhookConfig",
    "crl_configmap",
    "evaluate",
    "load_config",
]
