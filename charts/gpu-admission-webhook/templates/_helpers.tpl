{{/* Names, labels and the pieces shared by several templates. */}}

{{- define "gaw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gaw.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The image reference, as the peers' charts write it (Kyverno's "kyverno.image": an optional
registry before the repository, the tag defaulting to the chart's appVersion); a digest, when
set, pins the image and replaces the tag (REPOSITORY@sha256:...), as Bitnami's common.images.image
does: a tag can be moved, a digest cannot. */}}
{{- define "gaw.image" -}}
{{- $repository := .Values.image.repository -}}
{{- with .Values.image.registry -}}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag | toString) -}}
{{- end -}}
{{- end -}}

{{/* The installation the audit's policy reports belong to (their name and owner label). */}}
{{- define "gaw.reportOwner" -}}
{{- .Values.audit.reportOwner | default (include "gaw.fullname" .) -}}
{{- end -}}

{{- define "gaw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gaw.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gaw.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gaw.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "gaw.serviceAccountName" -}}
{{- default (include "gaw.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The Secret holding tls.crt, tls.key and ca.crt, mounted at /etc/webhook/tls. */}}
{{- define "gaw.tlsSecretName" -}}
{{- printf "%s-tls" (include "gaw.fullname" .) -}}
{{- end -}}

{{- define "gaw.serviceDNSNames" -}}
{{- $svc := include "gaw.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson -}}
{{- end -}}

{{/*
Chart-generated TLS material (certManager.enabled=false), as YAML with caCrt, tlsCrt, tlsKey.
Templates render separately, so the material is generated once per render and memoised in
.Values (shared by every template of the release); otherwise the Secret and the two
caBundles would carry different CAs. An existing Secret (helm upgrade) is reused so the
caBundle stays stable and running pods keep a certificate the API server trusts.
*/}}
{{- define "gaw.generatedTLS" -}}
{{- if not (hasKey .Values "__generatedTLS") -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "gaw.tlsSecretName" .) -}}
{{- $material := dict -}}
{{- if and $existing $existing.data (hasKey $existing.data "ca.crt") (hasKey $existing.data "tls.crt") (hasKey $existing.data "tls.key") -}}
{{- $material = dict "caCrt" (index $existing.data "ca.crt" | b64dec) "tlsCrt" (index $existing.data "tls.crt" | b64dec) "tlsKey" (index $existing.data "tls.key" | b64dec) -}}
{{- else -}}
{{- $days := int .Values.generatedCertValidityDays -}}
{{- $ca := genCA (printf "%s-ca" (include "gaw.fullname" .)) $days -}}
{{- $dns := include "gaw.serviceDNSNames" . | fromJsonArray -}}
{{- $cert := genSignedCert (printf "%s.%s.svc" (include "gaw.fullname" .) .Release.Namespace) nil $dns $days $ca -}}
{{- $material = dict "caCrt" $ca.Cert "tlsCrt" $cert.Cert "tlsKey" $cert.Key -}}
{{- end -}}
{{- $_ := set .Values "__generatedTLS" $material -}}
{{- end -}}
{{- toYaml (get .Values "__generatedTLS") -}}
{{- end -}}

{{/* Whether webhook matchConditions are rendered: GA (v1) since Kubernetes 1.28. */}}
{{- define "gaw.matchConditionsEnabled" -}}
{{- $mode := toString .Values.webhooks.matchConditions.enabled -}}
{{- if eq $mode "true" -}}
true
{{- else if eq $mode "auto" -}}
{{- if semverCompare ">=1.28.0-0" .Capabilities.KubeVersion.Version -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/*
CEL: true when some container or init container of the pod spec at `path` has a limits or
requests key containing "/" (an extended resource such as nvidia.com/gpu), or when the pod spec
has DRA resourceClaims (a GPU from a claim carries no extended resource; SPEC §6). Every optional
field is guarded with has(): an error in a match condition would make the API server apply
the failurePolicy instead of skipping the object.
*/}}
{{- define "gaw.celUsesExtended" -}}
{{- $p := . -}}
{{- $c := "has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k.contains('/'))) || (has(c.resources.requests) && c.resources.requests.exists(k, k.contains('/'))))" -}}
{{- printf "((has(%s.containers) && %s.containers.exists(c, %s)) || (has(%s.initContainers) && %s.initContainers.exists(c, %s)) || (has(%s.resourceClaims) && size(%s.resourceClaims) > 0))" $p $p $c $p $p $c $p $p -}}
{{- end -}}

{{/*
CEL: true when the pod spec at `path` (of the object or template at `parent`) has a way to reach GPUs that no
resource counts (SPEC §12): a device env var in a container, a privileged container, a mount at
the device-list path, a hostPath that may hold device nodes, one of config.gpuAccess.runtimeClasses,
a CDI annotation (cdi.k8s.io/, nvidia.cdi.k8s.io). Only the workloads entry uses it (early
feedback on templates; their pods reach the access entry, which has no condition).
*/}}
{{- define "gaw.celGpuBypass" -}}
{{- $p := index . 0 -}}
{{- $o := index . 1 -}}
{{- $root := index . 2 -}}
{{- $c := "(has(c.env) && c.env.exists(e, e.name in ['NVIDIA_VISIBLE_DEVICES', 'NVIDIA_MIG_CONFIG_DEVICES', 'NVIDIA_MIG_MONITOR_DEVICES', 'NVIDIA_IMEX_CHANNELS'])) || (has(c.securityContext) && has(c.securityContext.privileged) && c.securityContext.privileged) || (has(c.volumeMounts) && c.volumeMounts.exists(v, v.mountPath.contains('nvidia-container-devices')))" -}}
{{- $h := "v.hostPath.path.contains('dev') || v.hostPath.path.contains('/.') || v.hostPath.path.matches('^/*$')" -}}
{{- printf "((has(%s.containers) && %s.containers.exists(c, %s)) || (has(%s.initContainers) && %s.initContainers.exists(c, %s)) || (has(%s.volumes) && %s.volumes.exists(v, has(v.hostPath) && (%s))) || (has(%s.runtimeClassName) && %s.runtimeClassName in %s) || (has(%s.metadata) && has(%s.metadata.annotations) && %s.metadata.annotations.exists(k, k.startsWith('cdi.k8s.io/') || k.startsWith('nvidia.cdi.k8s.io'))))" $p $p $c $p $p $c $p $p $h $p $p (include "gaw.gpuAccessRuntimeClasses" $root) $o $o $o -}}
{{- end -}}

{{/* Whether GPU access control is on (config.gpuAccess.mode other than off; default warn). */}}
{{- define "gaw.gpuAccessOn" -}}
{{- $access := .Values.config.gpuAccess | default dict -}}
{{- if ne (toString ($access.mode | default "warn")) "off" -}}true{{- end -}}
{{- end -}}

{{/*
The runtime classes of config.gpuAccess.runtimeClasses (NVIDIA's) and of every family in
config.gpuAccess.vendorRuntimeClasses, as a CEL list literal: exactly the configured names (the
built-in default when runtimeClasses is absent; tests/chart compares it with
webhook/core/config/access.py).
*/}}
{{- define "gaw.gpuAccessRuntimeClasses" -}}
{{- $access := .Values.config.gpuAccess | default dict -}}
{{- $classes := list "nvidia" "nvidia-cdi" "nvidia-legacy" -}}
{{- if hasKey $access "runtimeClasses" -}}{{- $classes = $access.runtimeClasses | default list -}}{{- end -}}
{{- range $family, $names := ($access.vendorRuntimeClasses | default dict) -}}{{- $classes = concat $classes ($names | default list) -}}{{- end -}}
{{- $quoted := list -}}
{{- range $classes -}}{{- $quoted = append $quoted (printf "'%s'" (toString . | replace "'" "")) -}}{{- end -}}
{{- printf "[%s]" (join ", " $quoted) -}}
{{- end -}}

{{/*
The access entry's failurePolicy (SPEC §12): `auto` is Fail under `enforce` (an unreviewed pod
is never admitted silently) and Ignore under `warn` (an outage only loses warnings). Under
`enforce` with the native access policies installed (nativePolicies.access.enabled) `auto` is
Ignore: the API server itself then denies the routes CEL can see and writes the voids while the
webhook is down, so the webhook is no longer the reason no pod can be created. Ignore under
enforce without them would reopen every route while the webhook is unreachable: refused.
*/}}
{{- define "gaw.gpuAccessFailurePolicy" -}}
{{- $access := .Values.config.gpuAccess | default dict -}}
{{- $mode := toString ($access.mode | default "warn") -}}
{{- $policy := toString (.Values.webhooks.gpuAccess.failurePolicy | default "auto") -}}
{{- $native := (.Values.nativePolicies.access | default dict).enabled -}}
{{- if eq $policy "auto" -}}
{{- if and (eq $mode "enforce") (not $native) -}}Fail{{- else -}}Ignore{{- end -}}
{{- else if and (eq $policy "Ignore") (eq $mode "enforce") (not $native) -}}
{{- fail "webhooks.gpuAccess.failurePolicy: Ignore contradicts config.gpuAccess.mode: enforce (pods would be admitted unreviewed while the webhook is down); use auto or Fail, or install the native access policies (nativePolicies.access.enabled)" -}}
{{- else -}}
{{- $policy -}}
{{- end -}}
{{- end -}}

{{/*
Where the pods entries go (one review where one suffices, docs/operations/server.md "Reviews
per pod"): "all" (their namespaceSelector as is) or a JSON list of the only namespaces left to
them. When the access entry fails closed (failurePolicy Fail: `enforce`, or set so), it already
sends every pod CREATE outside its exempt namespaces to the same /mutate and /validate, with the
same timeout, and the webhook's answer does not depend on which entry asked. The pods entries
would only review the same pod a second time (the mutating one first, the access entry then
sees the patched object and patches nothing; the user saw every warning twice). So they keep
only the namespaces the access entry exempts (less those excluded from both); none: left out.
Availability: unchanged, since while the webhook is unreachable the access entry (Fail) already
rejects every pod in its namespaces, GPU or not. Never fails open: every pod the pods entries
reviewed is still reviewed by an entry with failurePolicy Fail (the access entry, or the pods
entry's own policy in the exempt namespaces). Under `warn` the access entry is Ignore: the
pods entries stay (one entry could not keep Fail for GPU pods and Ignore for the others), and
the access entry leaves them their pods instead (gaw.accessDefersToPods).
*/}}
{{- define "gaw.podsEntryNamespaces" -}}
{{- if and (include "gaw.gpuAccessOn" .) (eq (include "gaw.gpuAccessFailurePolicy" .) "Fail") -}}
{{- $access := .Values.config.gpuAccess | default dict -}}
{{- $exempt := list "gpu-operator" "nvidia-gpu-operator" -}}
{{- if hasKey $access "exemptNamespaces" -}}{{- $exempt = $access.exemptNamespaces | default list -}}{{- end -}}
{{- $excluded := concat (list "kube-system" .Release.Namespace) .Values.webhooks.excludeNamespaces -}}
{{- $only := list -}}
{{- range $exempt -}}{{- if not (has . $excluded) -}}{{- $only = append $only . -}}{{- end -}}{{- end -}}
{{- toJson ($only | uniq) -}}
{{- else -}}all{{- end -}}
{{- end -}}

{{/*
Whether the GPU access entry leaves to the pods entries the pod CREATEs they review (one review
where one suffices under `warn`, docs/operations/server.md "Reviews per pod"): when the access
entry is Ignore (`warn`, or `enforce` with the native access policies), the pods entries are Fail
and both have matchConditions. The pods entries then send a pod CREATE that asks for an extended
resource (or has DRA claims) to the same /mutate and /validate, with the same timeout, in a
superset of the access entry's namespaces (the access entry also skips the exempt ones), at Fail:
the access entry, at Ignore, would only review the same pod a second time. With the pods entries
at Ignore, or without matchConditions (before 1.28), nothing changes (gaw.accessDefersCondition).
*/}}
{{- define "gaw.accessDefersToPods" -}}
{{- if and (include "gaw.gpuAccessOn" .) (eq (include "gaw.gpuAccessFailurePolicy" .) "Ignore") (eq (toString .Values.webhooks.pods.failurePolicy) "Fail") (include "gaw.matchConditionsEnabled" .) -}}true{{- end -}}
{{- end -}}

{{/*
CEL, under gaw.accessDefersToPods: true for what the access entry must still review (every
UPDATE, the ephemeralcontainers subresource, every pod CREATE the pods entries skip). The pods
entries' condition is then its negation, `!(this)`: the same expression on the same object, so
it costs one operation more. A CEL error (the API server's runtime budget, docs/operations/
deploy.md) makes the Ignore access entry skip the object; an object that costs the access
condition over budget costs the pods condition over budget too, and the pods entry, at Fail,
rejects it: no pod the access entry reviewed before is now admitted unreviewed.
*/}}
{{- define "gaw.accessDefersCondition" -}}
{{- printf "request.operation != 'CREATE' || !(has(object.spec) && %s)" (include "gaw.celUsesExtended" "object.spec") -}}
{{- end -}}

{{/* The pods entries' extra namespace expression (gaw.podsEntryNamespaces: a JSON list). */}}
{{- define "gaw.podsEntryOnly" -}}
{{- if ne . "all" -}}
- key: kubernetes.io/metadata.name
  operator: In
  values: {{ . }}
{{- end -}}
{{- end -}}

{{/*
Namespaces the GPU access entry skips: the others' plus config.gpuAccess.exemptNamespaces,
exactly as written (an empty list exempts nothing; the built-in default only when the key is
absent).
*/}}
{{- define "gaw.gpuAccessNamespaceSelector" -}}
{{- $access := .Values.config.gpuAccess | default dict -}}
{{- $exempt := list "gpu-operator" "nvidia-gpu-operator" -}}
{{- if hasKey $access "exemptNamespaces" -}}{{- $exempt = $access.exemptNamespaces | default list -}}{{- end -}}
{{- $excluded := concat (list "kube-system" .Release.Namespace) .Values.webhooks.excludeNamespaces $exempt | uniq -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: {{ toJson $excluded }}
{{- if .Values.webhooks.namespaceOptOutLabel }}
  - key: {{ .Values.webhooks.namespaceOptOutLabel }}
    operator: NotIn
    values: ["true"]
{{- end }}
{{- end -}}

{{/*
What the access entry is sent (SPEC §12 "What reaches the webhook"): Pod CREATE and UPDATE (an
UPDATE may change a container's image: kubernetes pkg/apis/core/validation/validation.go,
ValidatePodUpdate, lets spec.containers[*].image and spec.initContainers[*].image change), and
UPDATE of the pods/ephemeralcontainers subresource (`kubectl debug`; ValidatePodEphemeralContainersUpdate
lets ephemeral containers be added, never changed or removed). A rule on `pods` does not match
its subresources: the subresource is listed by name. Nowhere else: the pods entry (CRL
resources, placement) stays CREATE only, since an UPDATE cannot change resources (pods/resize
changes cpu and memory only) and an ephemeral container has none (validateEphemeralContainers:
validateFieldAllowList refuses `resources` and `ports`, "cannot be set for an Ephemeral Container").
*/}}
{{- define "gaw.gpuAccessRules" -}}
- apiGroups: [""]
  apiVersions: ["v1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["pods"]
  scope: Namespaced
- apiGroups: [""]
  apiVersions: ["v1"]
  operations: ["UPDATE"]
  resources: ["pods/ephemeralcontainers"]
  scope: Namespaced
{{- end -}}

{{- define "gaw.gpuAccessWebhook" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- $fullname := include "gaw.fullname" $root -}}
# GPU access control (SPEC §12): every pod, its updates and its ephemeral containers, outside
# the exempt namespaces. No condition of its own: any condition that reads the pod costs in
# proportion to what the tenant writes, and a pod padded past the API server's CEL budget
# would make the entry fail its condition and be skipped under Ignore (docs/operations/deploy.md).
# Only the pods entries' one, negated, when it is Ignore (gaw.accessDefersToPods).
# failurePolicy Fail under enforce, Ignore under warn (webhooks.gpuAccess.failurePolicy: auto).
- name: {{ printf "gpu-access.%s.%s.svc" $fullname $root.Release.Namespace }}
  admissionReviewVersions: ["v1"]
  sideEffects: None
  timeoutSeconds: {{ $root.Values.webhooks.timeoutSeconds }}
  failurePolicy: {{ include "gaw.gpuAccessFailurePolicy" $root }}
  {{- if eq $path "/mutate" }}
  reinvocationPolicy: IfNeeded
  {{- end }}
  {{- include "gaw.clientConfig" (list $root $path) | nindent 2 }}
  rules:
    {{- include "gaw.gpuAccessRules" $root | nindent 4 }}
  namespaceSelector:
    {{- include "gaw.gpuAccessNamespaceSelector" $root | nindent 4 }}
  {{- if include "gaw.accessDefersToPods" $root }}
  # The pod CREATEs the pods entry (Fail) reviews are not sent here a second time.
  matchConditions:
    - name: not-reviewed-by-the-pods-entry
      expression: {{ include "gaw.accessDefersCondition" $root | quote }}
  {{- end }}
{{- end -}}

{{- define "gaw.podMatchConditions" -}}
- name: uses-extended-resources
{{- if include "gaw.accessDefersToPods" . }}
  expression: {{ printf "!(%s)" (include "gaw.accessDefersCondition" .) | quote }}
{{- else }}
  expression: {{ printf "has(object.spec) && %s" (include "gaw.celUsesExtended" "object.spec") | quote }}
{{- end }}
{{- end -}}

{{- define "gaw.workloadMatchConditions" -}}
{{- $template := printf "has(object.spec) && has(object.spec.template) && has(object.spec.template.spec) && %s" (include "gaw.celUsesExtended" "object.spec.template.spec") -}}
{{- $cron := printf "has(object.spec) && has(object.spec.jobTemplate) && has(object.spec.jobTemplate.spec) && has(object.spec.jobTemplate.spec.template) && has(object.spec.jobTemplate.spec.template.spec) && %s" (include "gaw.celUsesExtended" "object.spec.jobTemplate.spec.template.spec") -}}
{{- if include "gaw.gpuAccessOn" . }}
{{- $tpl := "has(object.spec) && has(object.spec.template) && has(object.spec.template.spec)" -}}
{{- $tplBypass := printf "%s && %s" $tpl (include "gaw.celGpuBypass" (list "object.spec.template.spec" "object.spec.template" .)) -}}
{{- $cronTpl := "has(object.spec) && has(object.spec.jobTemplate) && has(object.spec.jobTemplate.spec) && has(object.spec.jobTemplate.spec.template) && has(object.spec.jobTemplate.spec.template.spec)" -}}
{{- $cronBypass := printf "%s && %s" $cronTpl (include "gaw.celGpuBypass" (list "object.spec.jobTemplate.spec.template.spec" "object.spec.jobTemplate.spec.template" .)) -}}
- name: uses-extended-resources-or-reaches-gpus
  expression: {{ printf "(%s) || (%s) || (%s) || (%s)" $template $cron $tplBypass $cronBypass | quote }}
{{- else }}
- name: uses-extended-resources
  expression: {{ printf "(%s) || (%s)" $template $cron | quote }}
{{- end }}
{{- end -}}

{{/*
Namespaces never sent to the webhook: kube-system, the release namespace (so the webhook's
own pods can always start) and webhooks.excludeNamespaces; plus the opt-out label.
*/}}
{{- define "gaw.namespaceSelector" -}}
{{- $excluded := concat (list "kube-system" .Release.Namespace) .Values.webhooks.excludeNamespaces | uniq -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: {{ toJson $excluded }}
{{- if .Values.webhooks.namespaceOptOutLabel }}
  - key: {{ .Values.webhooks.namespaceOptOutLabel }}
    operator: NotIn
    values: ["true"]
{{- end }}
{{- end -}}

{{- define "gaw.clientConfig" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
clientConfig:
  service:
    name: {{ include "gaw.fullname" $root }}
    namespace: {{ $root.Release.Namespace }}
    path: {{ $path }}
    port: {{ $root.Values.service.port }}
  {{- if not $root.Values.certManager.enabled }}
  caBundle: {{ (include "gaw.generatedTLS" $root | fromYaml).caCrt | b64enc }}
  {{- end }}
{{- end -}}

{{- define "gaw.workloadRules" -}}
- apiGroups: ["apps"]
  apiVersions: ["v1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["deployments", "statefulsets", "daemonsets", "replicasets"]
  scope: Namespaced
- apiGroups: ["batch"]
  apiVersions: ["v1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["jobs", "cronjobs"]
  scope: Namespaced
{{- end -}}

{{- define "gaw.podRules" -}}
- apiGroups: [""]
  apiVersions: ["v1"]
  operations: ["CREATE"]
  resources: ["pods"]
  scope: Namespaced
{{- end -}}
