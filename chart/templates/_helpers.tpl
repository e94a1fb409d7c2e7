{{/* Labels shared by every object the chart renders; deploy/*.yaml carries the same set. */}}
{{- define "uds-vm-operator.labels" -}}
app.kubernetes.io/name: uds-vm-operator
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: uds
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "uds-vm-operator.selectorLabels" -}}
app.kubernetes.io/name: uds-vm-operator
app.kubernetes.io/component: operator
{{- end }}

{{/* The namespaced-flavour needs at least one namespace, otherwise the operator could reach nothing. */}}
{{- define "uds-vm-operator.checkScope" -}}
{{- if not (has .Values.rbac.scope (list "cluster" "namespaced")) }}
{{- fail (printf "rbac.scope must be cluster or namespaced, not %q" .Values.rbac.scope) }}
{{- end }}
{{- if and (eq .Values.rbac.scope "namespaced") (empty (include "uds-vm-operator.watchNamespaces" . | fromJsonArray)) }}
{{- fail "rbac.scope=namespaced (the default) needs watchNamespaces, the namespaces whose VMs the operator manages: --set 'watchNamespaces={ns1,ns2}' (or rbac.scope=cluster, which AC-6 reports as not least privilege)" }}
{{- end }}
{{- end }}

{{/* watchNamespaces as a JSON list: a YAML list, or one comma-separated string (Zarf variables are strings). */}}
{{- define "uds-vm-operator.watchNamespaces" -}}
{{- $ns := .Values.watchNamespaces -}}
{{- if kindIs "string" $ns -}}
{{- $ns = splitList "," $ns -}}
{{- end -}}
{{- $clean := list -}}
{{- range $ns }}{{ with trim (toString .) }}{{ $clean = append $clean . }}{{ end }}{{ end -}}
{{- toJson $clean -}}
{{- end }}

{{/* The operator's image; the verifier pods it starts (SI-7) run the very same reference. With
image.digest the reference is pinned (repository:tag@digest): the node runs exactly the bytes that were signed. */}}
{{- define "uds-vm-operator.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}{{ with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}
