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

{{/*
Upstream's chart name (or nameOverride, as upstream reads it): the prefix of the names and the
key of the selector label that upstream's users select the driver's objects and pods by.
*/}}
{{- define "cdriver.upstreamName" -}}
{{- default "dra-driver-nvidia-gpu" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The Deployment of the controller, also the name of its leader-election Lease. */}}
{{- define "cdriver.controllerName" -}}
{{- printf "%s-controller" (include "cdriver.upstreamName" .) -}}
{{- end -}}

{{- define "cdriver.pluginName" -}}
{{- printf "%s-kubelet-plugin" (include "cdriver.upstreamName" .) -}}
{{- end -}}

{{/* Selector of one component's pods, upstream's: "<name>-component: <component>". Call with
(dict "root" $ "component" "controller"). */}}
{{- define "cdriver.selectorLabels" -}}
{{ include "cdriver.upstreamName" .root }}-component: {{ .component }}
{{- end -}}

{{/* A component's pod labels: cdriver's own, then upstream's selector label. */}}
{{- define "cdriver.podLabels" -}}
{{ include "cdriver.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{ include "cdriver.selectorLabels" . }}
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
{{- if eq (include "cdriver.imexMode" .) "hostManaged" -}}true{{- end -}}
{{- end -}}

{{/* Env shared by controller and plugin: mode, isolation, gates, logging. */}}
{{- define "cdriver.commonEnv" -}}
- name: IMEX_MODE
  value: {{ include "cdriver.imexMode" . | quote }}
- name: IMEX_ISOLATION
  value: {{ include "cdriver.imexIsolation" . | quote }}
- name: LOG_VERBOSITY
  value: {{ .Values.logVerbosity | quote }}
- name: LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
{{- with include "cdriver.featureGates" . }}
- name: FEATURE_GATES
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{/*
Values written for the upstream NVIDIA chart, mapped onto this chart's keys. Where both are
given, the upstream key wins: it is what a values file carried over from upstream asks for.
*/}}
{{- define "cdriver.upstreamImex" -}}
{{- toJson (default dict (dig "imex" dict (.Values.resources.computeDomains | default dict))) -}}
{{- end -}}

{{- define "cdriver.imexMode" -}}
{{- (include "cdriver.upstreamImex" . | fromJson).mode | default .Values.imex.mode -}}
{{- end -}}

{{- define "cdriver.imexIsolation" -}}
{{- (include "cdriver.upstreamImex" . | fromJson).isolation | default .Values.imex.isolation -}}
{{- end -}}

{{- define "cdriver.imexHostSocketPath" -}}
{{- (include "cdriver.upstreamImex" . | fromJson).hostSocketPath | default .Values.imex.hostSocketPath -}}
{{- end -}}

{{/* The upstream chart's kubeletPlugin.containers.computeDomains block (empty if not given). */}}
{{- define "cdriver.upstreamPluginContainer" -}}
{{- toJson (dig "containers" "computeDomains" dict .Values.kubeletPlugin) -}}
{{- end -}}

{{/* The upstream chart's controller.containers.computeDomain block (empty if not given). */}}
{{- define "cdriver.upstreamControllerContainer" -}}
{{- toJson (dig "containers" "computeDomain" dict .Values.controller) -}}
{{- end -}}

{{- define "cdriver.cliqueLabelOwned" -}}
{{- $up := include "cdriver.upstreamPluginContainer" . | fromJson -}}
{{- or .Values.cliqueLabel.owned (default false $up.gpuCliqueLabelEnabled) -}}
{{- end -}}

{{- define "cdriver.pluginHealthPort" -}}
{{- $up := include "cdriver.upstreamPluginContainer" . | fromJson -}}
{{- if hasKey $up "healthcheckPort" -}}{{ int $up.healthcheckPort }}{{- else -}}{{ int .Values.kubeletPlugin.healthcheckPort }}{{- end -}}
{{- end -}}

{{/* HTTP endpoint of a component: the upstream-style endpoint if given, else ":<port>". */}}
{{- define "cdriver.controllerHttpEndpoint" -}}
{{- .Values.controller.metrics.httpEndpoint | default (printf ":%d" (int .Values.controller.metrics.port)) -}}
{{- end -}}

{{/* The plugin's metrics endpoint as the user gave it, or ":<port>" (the pod serves it on its pod IP). */}}
{{- define "cdriver.pluginHttpEndpoint" -}}
{{- .Values.kubeletPlugin.metrics.computeDomainHttpEndpoint | default (printf ":%d" (int .Values.kubeletPlugin.metrics.port)) -}}
{{- end -}}

{{/* The port number at the end of an endpoint such as ":8080" or "0.0.0.0:8080". */}}
{{- define "cdriver.endpointPort" -}}
{{- regexFind "[0-9]+$" . | int -}}
{{- end -}}

{{/* Pod annotations: the chart-wide podAnnotations under the component's own, and with a
metricsPort (metrics on) and metrics.podAnnotations.enabled, prometheus.io/scrape, /port and /path. */}}
{{- define "cdriver.podAnnotations" -}}
{{- $merged := merge (deepCopy (.component.podAnnotations | default dict)) (.root.Values.podAnnotations | default dict) -}}
{{- if and .metricsPort (dig "podAnnotations" "enabled" true (.root.Values.metrics | default dict)) }}
{{- $merged = merge $merged (dict "prometheus.io/scrape" "true" "prometheus.io/port" (toString .metricsPort) "prometheus.io/path" "/metrics") -}}
{{- end }}
{{- with $merged }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* resource.k8s.io version for DeviceClasses: the newest the cluster serves (v1 from 1.34,
v1beta2/v1beta1 on 1.32-1.33). Without a cluster (helm template) it follows --kube-version. */}}
{{- define "cdriver.resourceApiVersion" -}}
{{- if and (.Capabilities.APIVersions.Has "resource.k8s.io/v1") (semverCompare ">=1.34.0-0" .Capabilities.KubeVersion.Version) -}}
resource.k8s.io/v1
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta2" -}}
resource.k8s.io/v1beta2
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta1" -}}
resource.k8s.io/v1beta1
{{- else -}}
resource.k8s.io/v1
{{- end -}}
{{- end -}}

{{/* Whether plugin pods serve sockets named after their pod UID, so that the old and the new pod
of a rolling update serve side by side (kubelet 1.33+): kubeletPlugin.rollingUpdate true or
false, or "auto": on when the API server is 1.33 or newer. */}}
{{- define "cdriver.pluginRolling" -}}
{{- $v := .Values.kubeletPlugin.rollingUpdate -}}
{{- if kindIs "bool" $v -}}{{ $v }}
{{- else if eq (toString $v) "auto" -}}{{ semverCompare ">=1.33.0-0" .Capabilities.KubeVersion.Version }}
{{- else -}}{{ fail (printf "kubeletPlugin.rollingUpdate must be true, false or auto, not %v" $v) }}
{{- end -}}
{{- end -}}

{{/* Whether the plugin pods running now may overlap with new ones: there is no plugin DaemonSet
yet, or its pods already serve per-pod sockets (they get POD_UID). The pods of upstream's
driver, or of a cdriver without per-pod sockets, are replaced whole. */}}
{{- define "cdriver.pluginPodsOverlap" -}}
{{- $ds := lookup "apps/v1" "DaemonSet" .Release.Namespace (include "cdriver.pluginName" .) -}}
{{- if not $ds -}}true
{{- else -}}
{{- $overlap := false -}}
{{- range (dig "spec" "template" "spec" "containers" list $ds) -}}
{{- range (.env | default list) -}}{{- if eq .name "POD_UID" -}}{{- $overlap = true -}}{{- end -}}{{- end -}}
{{- end -}}
{{- $overlap -}}
{{- end -}}
{{- end -}}

{{/* The plugin DaemonSet's update strategy: kubeletPlugin.updateStrategy when set; else, with
per-pod sockets, one new pod beside the old on a node at a time (maxSurge 1, maxUnavailable 0);
else every pod replaced at once (maxUnavailable 100%, upstream's). */}}
{{- define "cdriver.pluginUpdateStrategy" -}}
{{- if .Values.kubeletPlugin.updateStrategy -}}
{{- toYaml .Values.kubeletPlugin.updateStrategy -}}
{{- else if and (eq (include "cdriver.pluginRolling" .) "true") (eq (include "cdriver.pluginPodsOverlap" .) "true") -}}
type: RollingUpdate
rollingUpdate:
  maxSurge: 1
  maxUnavailable: 0
{{- else -}}
type: RollingUpdate
rollingUpdate:
  maxUnavailable: "100%"
{{- end -}}
{{- end -}}
