{{/* Chart name, release-prefixed full name and common labels. */}}
{{- define "cdriver.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cdriver.fullname" -}}
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

{{- define "cdriver.labels" -}}
app.kubernetes.io/name: {{ include "cdriver.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "cdriver.image" -}}
{{- printf "%s:%s" .Values.image.repository (default (printf "v%s" .Chart.AppVersion) .Values.image.tag) -}}
{{- end -}}

{{/* FEATURE_GATES value: sorted "K=v," pairs (upstream format). */}}
{{- define "cdriver.featureGates" -}}
{{- range $k := keys .Values.featureGates | sortAlpha -}}
{{- printf "%s=%t," $k (index $.Values.featureGates $k) -}}
{{- end -}}
{{- end -}}

{{- define "cdriver.hostManaged" -}}
{{- if eq .Values.imex.mode "hostManaged" -}}true{{- end -}}
{{- end -}}

{{/* Env shared by controller and plugin: mode, isolation, gates, logging. */}}
{{- define "cdriver.commonEnv" -}}
- name: IMEX_MODE
  value: {{ .Values.imex.mode | quote }}
- name: IMEX_ISOLATION
  value: {{ .Values.imex.isolation | quote }}
- name: LOG_VERBOSITY
  value: {{ .Values.logVerbosity | quote }}
- name: LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
{{- with include "cdriver.featureGates" . }}
- name: FEATURE_GATES
  value: {{ . | quote }}
{{- end }}
{{- end -}}
