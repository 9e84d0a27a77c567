"""Nodes labelled as a vendor's tools label them, for the e2e modules where the real scheduler
binds accelerator pods (test_e2e_vendor_scheduling.py, test_e2e_never_strand.py): each module's
nodes are selected by a label of that module only and tainted, so no other module's pod lands on
them; a pod spec that selects and tolerates them; the wait until the webhook's inventory places
a probe as the cluster's labels say; and a runner that creates a Deployment or Job through the
webhook and answers the node its pod was bound to."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from webhook.core.config.model import WebhookConfig
from webhook.core.policies.policyset import PolicySet

from .conftest import Cluster, cluster_inventory, kapi_nodes, real_scheduler
from .test_e2e_admission import call, expected_for
from .test_e2e_scheduling import create, scheduled, workload


@dataclass(frozen=True)
class NodeSet:
    """One module's nodes: `select` (label on all of them, value `run`), `pin` (label naming
    each), `taint` (key; value `run`, NoSchedule), `prefix` of the Node names."""

    select: str
    pin: str
    taint: str
    prefix: str
    run: str = uuid.uuid4().hex[:6]

    @contextmanager
    def made(
        self,
        core: Any,
        cluster: Cluster,
        scheduler: Mapping[str, str],
        nodes: Mapping[str, tuple[Mapping[str, str], str]],
    ) -> Iterator[dict[str, str]]:
        """short name -> Node name, made by node.sh with the labels and capacity of `nodes`."""
        specs = {
            short: ({**labels, self.select: self.run, self.pin: short}, capacity)
            for short, (labels, capacity) in nodes.items()
        }
        with kapi_nodes(
            core,
            cluster,
            scheduler,
            specs,
            prefix=f"{self.prefix}-{self.run}",
            taint=f"{self.taint}={self.run}:NoSchedule",
        ) as names:
            yield names

    def pod_spec(
        self, image: str, resource: str, node: str | None, env: Any = None
    ) -> dict[str, Any]:
        container: dict[str, Any] = {
            "name": "main",
            "image": image,
            "command": ["sleep", "3600"],
            "resources": {"limits": {resource: "1"}},
        }
        if env:
            container["env"] = env
        toleration = {
            "key": self.taint,
            "operator": "Equal",
            "value": self.run,
            "effect": "NoSchedule",
        }
        return {
            "nodeSelector": {self.select: self.run, **({self.pin: node} if node else {})},
            "tolerations": [toleration],
            "containers": [container],
        }

    def wait_synced(
        self,
        core: Any,
        namespace: str,
        policies: PolicySet,
        config: WebhookConfig,
        probes: list[tuple[str, str, str]],
    ) -> None:
        """Wait until the webhook places a probe pod per (name, image, resource) as the
        cluster's labels say (nodes are labelled after they are created: a count of nodes is
        not enough)."""
        deadline = time.monotonic() + 30
        for name, image, resource in probes:
            probe = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"probe-{name}-{self.run}"},
                "spec": self.pod_spec(image, resource, None),
            }
            while True:
                inventory = cluster_inventory(core, config)
                want = expected_for(probe, namespace, policies, config, inventory).mutated
                returned, _ = call(core.create_namespaced_pod, namespace, probe, dry_run="All")
                affinity = (want or {}).get("spec", {}).get("affinity")
                if affinity is not None and returned["spec"].get("affinity") == affinity:
                    break
                got = returned["spec"].get("affinity")
                assert time.monotonic() < deadline, f"{got} != {affinity}"
                time.sleep(0.5)

    def runner(
        self, core: Any, apps: Any, batch: Any, namespace: str, names: Mapping[str, str]
    ) -> Any:
        """run(kind, image, resource, node=None, env=None) -> (short name of the node the pod
        was bound to, or None when the scheduler found it unschedulable; the warnings shown)."""
        short = {v: k for k, v in names.items()}

        def go(
            kind: str, image: str, resource: str, node: str | None = None, env: Any = None
        ) -> tuple[str | None, list[str]]:
            app = f"{kind.lower()}-{uuid.uuid4().hex[:6]}"
            template = {
                "metadata": {"labels": {"app": app}},
                "spec": self.pod_spec(image, resource, node, env),
            }
            if kind == "Job":
                template["spec"]["restartPolicy"] = "Never"
            kw = {"apps": apps, "batch": batch, "namespace": namespace}
            _, warnings = create(kind, workload(kind, app, template), **kw)
            (bound,) = scheduled(core, namespace, app).values()
            return (None if bound is None else short.get(bound, bound)), warnings

        return go


def module_fixtures(
    node_set: NodeSet,
    nodes: Mapping[str, tuple[dict[str, str], str]],
    probes: list[tuple[str, str, str]],
    what: str,
) -> tuple[Any, ...]:
    """The fixtures a module whose pods the real scheduler binds on `nodes` needs, assigned by
    that module to its own names: `scheduler`, `labelled` (short name -> Node name), `synced`
    (the webhook's inventory places each of `probes` as the labels say), `batch`, `run`
    (`NodeSet.runner`)."""

    @pytest.fixture(scope="module")
    def scheduler(cluster: Cluster) -> dict[str, str]:
        return real_scheduler(cluster, what)

    @pytest.fixture(scope="module")
    def labelled(
        core: Any, cluster: Cluster, scheduler: dict[str, str]
    ) -> Iterator[dict[str, str]]:
        with node_set.made(core, cluster, scheduler, nodes) as names:
            yield names

    @pytest.fixture(scope="module")
    def synced(
        core: Any, namespace: str, policies: PolicySet, webhook_config: WebhookConfig,
        labelled: dict[str, str],
    ) -> None:  # fmt: skip
        node_set.wait_synced(core, namespace, policies, webhook_config, probes)

    @pytest.fixture
    def batch(cluster: Cluster) -> Any:
        from kubernetes import client

        return client.BatchV1Api(cluster.api)

    @pytest.fixture
    def run(
        core: Any, apps: Any, batch: Any, namespace: str, labelled: dict[str, str], synced: None
    ) -> Any:
        return node_set.runner(core, apps, batch, namespace, labelled)

    return scheduler, labelled, synced, batch, run
