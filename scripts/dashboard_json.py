"""Write the Grafana dashboard the chart ships (charts/gpu-admission-webhook/dashboards/).

    python scripts/dashboard_json.py          # rewrite the JSON
    python scripts/dashboard_json.py --check  # exit 1 if the JSON is not what this writes

Every query selects the webhook's series with the dashboard's variables: `namespace` (the
release's namespace, a target label the ServiceMonitor adds) and `replica` (the `pod` target
label). The audit's own `namespace` label (where a finding is) collides with that target label,
so Prometheus stores it as `exported_namespace` (honor_labels: false, the ServiceMonitor's
default).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "charts" / "gpu-admission-webhook" / "dashboards" / "gpu-admission-webhook.json"
S = 'namespace=~"$namespace",pod=~"$replica"'
RATE = "$__rate_interval"


def _latency(metric: str, by: str) -> list[tuple[str, str]]:
    return [
        (
            f"histogram_quantile({q}, sum by ({by}le) (rate({metric}_bucket{{{S}}}[{RATE}])))",
            f"p{int(q * 100)}" + (" {{endpoint}}" if by else ""),
        )
        for q in (0.5, 0.9, 0.99)
    ]


# (title, unit, description, [(expr, legend)])
PANELS: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    (
        "Reviews per second by endpoint and verdict",
        "reqps",
        "Admission reviews answered: result allowed, patched, denied or error.",
        [
            (
                f"sum by (endpoint, result) (rate(gpu_webhook_reviews_total{{{S}}}[{RATE}]))",
                "{{endpoint}} {{result}}",
            )
        ],
    ),
    (
        "Review latency (server side)",
        "s",
        "Body received to answer ready. The alert fires on p99 above prometheusRule's threshold.",
        _latency("gpu_webhook_review_duration_seconds", "endpoint, "),
    ),
    (
        "Denied reviews per second by kind",
        "reqps",
        "Reviews answered with a denial, by the kind of object (Pod, Deployment, ConfigMap ...).",
        [
            (
                f'sum by (kind) (rate(gpu_webhook_reviews_total{{{S},result="denied"}}[{RATE}]))',
                "{{kind}}",
            )
        ],
    ),
    (
        "Violations per second by CRL policy and rule",
        "ops",
        "Violations in the denials /validate returned, by CRL ConfigMap (gpu-admission-webhook: "
        "the webhook's own rules, such as cuda; other: past the first 20 policies) and rule.",
        [
            (
                f"sum by (policy, rule) (rate(gpu_webhook_violations_total{{{S}}}[{RATE}]))",
                "{{policy}} {{rule}}",
            )
        ],
    ),
    (
        "Accelerator containers whose runtime version is unknown, and why",
        "percentunit",
        "Share of the accelerator containers /mutate evaluated whose runtime version (CUDA, ROCm, "
        "CANN) nothing told, per runtime, by reason: lookups-off, not-known (not asked), slow (no "
        "answer within the budget), or the registry lookup's failure (unreachable, timeout, "
        "unauthorized, not-found, no-cuda ...).",
        [
            (
                f"sum by (runtime, reason) (rate(gpu_webhook_cuda_unknown_total{{{S}}}[{RATE}])) "
                f"/ on (runtime) group_left "
                f"sum by (runtime) (rate(gpu_webhook_gpu_containers_total{{{S}}}[{RATE}]))",
                "{{runtime}} {{reason}}",
            ),
            (
                f"sum by (runtime) (rate(gpu_webhook_cuda_unknown_total{{{S}}}[{RATE}])) / "
                f"sum by (runtime) (rate(gpu_webhook_gpu_containers_total{{{S}}}[{RATE}]))",
                "{{runtime}} all reasons",
            ),
        ],
    ),
    (
        "Placements per second by rule",
        "ops",
        "Node affinity parts /mutate injected, by the rule that set them: backward, "
        "minorVersion, forward (forward-compatible nodes), architecture-floor, compute.",
        [
            (
                f"sum by (rule) (rate(gpu_webhook_placements_total{{{S}}}[{RATE}]))",
                "{{rule}}",
            )
        ],
    ),
    (
        "Registry lookup cache hits, misses and budget",
        "ops",
        "Images reviews asked for: answered from the lookup cache (hit) or not (miss); left "
        "without an answer within the admission budget; lookups that answered after it.",
        [
            (
                f"sum by (result) (rate(gpu_webhook_image_cache_requests_total{{{S}}}[{RATE}]))",
                "cache {{result}}",
            ),
            (
                f"sum(rate(gpu_webhook_image_lookups_over_budget_total{{{S}}}[{RATE}]))",
                "no answer within the budget",
            ),
            (
                f"sum(rate(gpu_webhook_image_lookups_late_total{{{S}}}[{RATE}]))",
                "answered after the budget",
            ),
        ],
    ),
    (
        "Mutations per second by type",
        "ops",
        "cuda-affinity: CUDA node affinity added (a placement); resource-default, "
        "requests-from-limits, env-fix.",
        [
            (
                f"sum by (type) (rate(gpu_webhook_mutations_total{{{S}}}[{RATE}]))",
                "{{type}}",
            )
        ],
    ),
    (
        "Registry lookups per second by result",
        "ops",
        "Reads of image configurations (cache misses): found, no-cuda, not-found, and the "
        "failures unreachable, timeout, unauthorized, invalid, busy.",
        [
            (
                f"sum by (result) (rate(gpu_webhook_image_lookups_total{{{S}}}[{RATE}]))",
                "{{result}}",
            )
        ],
    ),
    (
        "Registry lookup cache and latency",
        "short",
        "Images in the lookup cache, lookups in flight, and the p99 of one lookup (seconds).",
        [
            (f"sum(gpu_webhook_image_cache_entries{{{S}}})", "cache entries"),
            (f"sum(gpu_webhook_image_lookups_in_flight{{{S}}})", "in flight"),
            (
                "histogram_quantile(0.99, sum by (le) "
                f"(rate(gpu_webhook_image_lookup_duration_seconds_bucket{{{S}}}[{RATE}])))",
                "lookup p99 (s)",
            ),
        ],
    ),
    (
        "Decision cache hit ratio",
        "percentunit",
        "Reviews answered from the decision cache (replica-identical pods of one controller).",
        [
            (
                f"sum(rate(gpu_webhook_decision_cache_hits_total{{{S}}}[{RATE}])) / "
                f"(sum(rate(gpu_webhook_decision_cache_hits_total{{{S}}}[{RATE}])) + "
                f"sum(rate(gpu_webhook_decision_cache_misses_total{{{S}}}[{RATE}])))",
                "hit ratio",
            )
        ],
    ),
    (
        "CRL policies",
        "short",
        "Policies in force, invalid CRL ConfigMaps (skipped) and conflicting resource keys.",
        [
            (f"max(gpu_webhook_policies_loaded{{{S}}})", "loaded"),
            (f"max(gpu_webhook_invalid_configmaps{{{S}}})", "invalid"),
            (f"max(gpu_webhook_policy_conflicts{{{S}}})", "conflicts"),
        ],
    ),
    (
        "Inventory size",
        "short",
        "Objects each watch keeps (Node: the node inventory), and nodes per CUDA version.",
        [
            (f"max by (kind) (gpu_webhook_reflector_objects{{{S}}})", "{{kind}}"),
            (f"max by (cuda) (gpu_webhook_nodes{{{S}}})", "nodes with CUDA {{cuda}}"),
        ],
    ),
    (
        "Sync age",
        "s",
        "Seconds since each watched kind's snapshot was last published (a quiet cluster "
        "publishes nothing: age alone is no problem, failing watches are).",
        [
            (f"max by (kind) (gpu_webhook_reflector_seconds_since_sync{{{S}}})", "{{kind}}"),
            (
                f"sum by (kind) (increase(gpu_webhook_reflector_errors_total{{{S}}}[5m]))",
                "errors 5m {{kind}}",
            ),
        ],
    ),
    (
        "Audit findings by namespace",
        "short",
        "Owners with a finding in the last audit, by the namespace they are in "
        "(exported_namespace) and result: fail would be denied, warn would change.",
        [
            (
                "sum by (exported_namespace, result) (max by (exported_namespace, policy, result) "
                f"(gpu_webhook_audit_findings{{{S}}}))",
                "{{exported_namespace}} {{result}}",
            )
        ],
    ),
    (
        "Audit runs",
        "s",
        "Seconds since the last finished audit, and how long it took.",
        [
            (
                f"time() - max(gpu_webhook_audit_last_success_timestamp_seconds{{{S}}})",
                "since last audit",
            ),
            (f"max(gpu_webhook_audit_duration_seconds{{{S}}})", "duration"),
        ],
    ),
]


def dashboard() -> dict[str, Any]:
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    panels = []
    for index, (title, unit, description, queries) in enumerate(PANELS):
        panels.append(
            {
                "id": index + 1,
                "type": "timeseries",
                "title": title,
                "description": description,
                "datasource": datasource,
                "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
                "targets": [
                    {"refId": chr(ord("A") + n), "expr": expr, "legendFormat": legend}
                    for n, (expr, legend) in enumerate(queries)
                ],
            }
        )
    variables = [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
        },
        {
            "name": "namespace",
            "label": "Namespace",
            "type": "query",
            "datasource": datasource,
            "query": {"query": "label_values(gpu_webhook_ready, namespace)", "refId": "namespace"},
            "definition": "label_values(gpu_webhook_ready, namespace)",
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
            "current": {},
            "hide": 0,
        },
        {
            "name": "replica",
            "label": "Replica",
            "type": "query",
            "datasource": datasource,
            "query": {
                "query": 'label_values(gpu_webhook_ready{namespace=~"$namespace"}, pod)',
                "refId": "replica",
            },
            "definition": 'label_values(gpu_webhook_ready{namespace=~"$namespace"}, pod)',
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
            "current": {},
            "hide": 0,
        },
    ]
    return {
        "uid": "gpu-admission-webhook",
        "title": "GPU admission webhook",
        "description": "gpu-admission-webhook: reviews, latency, policies, registry lookups, "
        "inventory and audit (charts/gpu-admission-webhook).",
        "tags": ["gpu-admission-webhook", "kubernetes", "admission"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "timezone": "browser",
        "annotations": {"list": []},
        "templating": {"list": variables},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is out of date: run python scripts/dashboard_json.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
