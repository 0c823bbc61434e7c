{{/* The objects' name: the release's, with the chart's unless it holds it. */}}
{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the pods; they never change for a release. */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Every object's labels. No chart or manager label: the plain manifests
of deploy/kubernetes are this chart rendered, and are applied without Helm. */}}
{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
{{- end -}}

{{/* Whether envoyproxy/ratelimit's config files are mounted. */}}
{{- define "sluice.ratelimitFiles" -}}
{{- if or .Values.ratelimitFiles .Values.existingRatelimitConfigMap -}}true{{- end -}}
{{- end -}}
