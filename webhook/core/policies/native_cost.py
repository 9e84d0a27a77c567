"""The CEL cost of the native CRL policy: a model of it, and the export's refusal when a group's
size would take a big Pod past the API server's per-expression limit.

Cost (apiserver pkg/apis/cel/config.go): PerCallLimit 1,000,000 per expression,
RuntimeCELCostBudget 10,000,000 per binding evaluation (here: per param, as the policy is
evaluated once per CRL ConfigMap: webhook.core.policies.native).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

PER_CALL_LIMIT = 1_000_000  # apiserver pkg/apis/cel/config.go PerCallLimit
RUNTIME_BUDGET = 10_000_000  # apiserver pkg/apis/cel/config.go RuntimeCELCostBudget

# Cost. The API server gives each expression PerCallLimit and each param's evaluation
# RuntimeCELCostBudget. The dominant expression is a container list's problems: per container
# it walks the limits and requests (each key tested against the group table, a linear `in`)
# and then a fixed set of rules. Model (an upper bound fitted on the real API server 1.36.2,
# tests/native): 300 per container plus 2·(group size + 10) per extended key. Measured: the
# shipped CRLs handle a Pod of 2,201 containers × 10 extended keys within PerCallLimit (the
# model says 1,785: it over-estimates).
REFERENCE_CONTAINERS = 64  # a Pod bigger than any real one (its containers and init containers)
REFERENCE_KEYS = 16  # extended resource keys in each of those containers

# The UPDATE check (native_cel.unchanged, variable "unchanged"): linear in the containers, as it
# pairs them by index. Measured on the real API server 1.36.2 (one CRL param, Deployments of N
# containers × 10 extended keys, an UPDATE that changes one label): when the resource maps are
# equal (nearly every UPDATE: cheap map equality) a Deployment of 4,000 containers passes (5,000
# is past etcd's request size); when they differ, the key-by-key comparison costs about 50 per
# key and container (1,750 containers pass, 1,875 exceed PerCallLimit). The check it replaced
# compared every container's signature with every other's: quadratic, 700 containers passed,
# 800 exceeded PerCallLimit, so an UPDATE that changed nothing was denied.
UPDATE_COST_PER_CONTAINER = 50
UPDATE_COST_PER_KEY = 50


def estimated_update_cost(
    containers: int = REFERENCE_CONTAINERS, keys: int = REFERENCE_KEYS
) -> int:
    """The model's cost of the UPDATE check when the resources changed (its worst case)."""
    return containers * (UPDATE_COST_PER_CONTAINER + UPDATE_COST_PER_KEY * keys)


def estimated_cost(groups: Mapping[str, Sequence[str]]) -> int:
    """The model's cost of one container list's problems for the reference Pod."""
    largest = max((len(keys) for keys in groups.values()), default=1)
    per_container = 300 + 2 * REFERENCE_KEYS * (largest + 1 + 10)
    return REFERENCE_CONTAINERS * per_container


def cost_problem(groups: Mapping[str, Sequence[str]]) -> str:
    """Why the export must be refused for its cost, or ""."""
    cost = estimated_cost(groups)
    if cost <= PER_CALL_LIMIT:
        return ""
    largest = max(groups.items(), key=lambda item: len(item[1]))
    return (
        f"group {largest[0]!r} has {len(largest[1])} keys: a Pod of {REFERENCE_CONTAINERS} "
        f"containers × {REFERENCE_KEYS} keys would cost about {cost:,} CEL units per "
        f"expression, above the API server's limit of {PER_CALL_LIMIT:,}"
    )
