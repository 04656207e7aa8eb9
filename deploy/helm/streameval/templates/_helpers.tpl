{{/* The release's name for every object, at most 63 characters. */}}
{{- define "streameval.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "streameval.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "streameval.labels" -}}
{{ include "streameval.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Whether the cluster serves the Prometheus Operator's API (or --api-versions says so). */}}
{{- define "streameval.operator" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end -}}

{{/* config.shutdown_timeout in whole seconds (20 when unset; a duration such as 500ms, 20s, 1m). */}}
{{- define "streameval.shutdownSeconds" -}}
{{- $value := toString (default "20s" .Values.config.shutdown_timeout) -}}
{{- if regexMatch "^[0-9]+ms$" $value -}}{{ div (trimSuffix "ms" $value | int) 1000 }}
{{- else if regexMatch "^[0-9]+s$" $value -}}{{ trimSuffix "s" $value }}
{{- else if regexMatch "^[0-9]+m$" $value -}}{{ mul (trimSuffix "m" $value | int) 60 }}
{{- else if regexMatch "^[0-9]+$" $value -}}{{ $value }}
{{- else -}}0
{{- end -}}
{{- end -}}
