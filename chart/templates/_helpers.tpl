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

{{/* The operator's image; the verifier pods it starts (SI-7) run the very same reference. Pinned by default
(repository:tag@digest): the node runs exactly the bytes that were signed. A tag-only reference is an explicit
opt-out (image.allowUnpinned), never what an empty value silently gives. */}}
{{- define "uds-vm-operator.image" -}}
{{- $digest := toString (.Values.image.digest | default "") -}}
{{- if $digest -}}
{{- if not (regexMatch "^sha256:[a-f0-9]{64}$" $digest) -}}
{{- fail (printf "image.digest must be sha256: and 64 hex digits (as `make image` prints it), not %q" $digest) -}}
{{- end -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}@{{ $digest }}
{{- else if .Values.image.allowUnpinned -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- else -}}
{{- fail "image.digest is required: the operator's image is pinned by digest (--set image.digest=sha256:..., as `make image` or `make zarf-build` prints it); image.allowUnpinned=true accepts a tag alone (SI-7/CM-14 then rest on the registry's tag)" -}}
{{- end -}}
{{- end }}
