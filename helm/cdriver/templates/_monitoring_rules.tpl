{{/*
The alert rules: one source for the PrometheusRule (templates/monitoring-prometheusrule.yaml) and
the plain rules file monitoring/cdriver-alerts.yaml (these defaults rendered: `make
monitoring-rules`). Thresholds, `for:` and severities come from .Values.monitoring.alerts. Each
description names the failure boundary the alert points at, its runbook the command to run;
`{{ $labels.x }}` there is Prometheus' templating, written as raw strings here.
*/}}

{{/* One rule. Call with (dict "a" <alert values> "alert" NAME "component" COMPONENT-or-"" "expr"
EXPR "summary" S "description" D "runbook" R). */}}
{{- define "cdriver.monitoring.rule" -}}
{{- if .a.enabled -}}
- alert: {{ .alert }}
  expr: {{ .expr | quote }}
  for: {{ .a.for }}
  labels:
    severity: {{ .a.severity }}
    {{- with .component }}
    component: {{ . }}
    {{- end }}
  annotations:
    summary: {{ .summary | quote }}
    description: {{ .description | quote }}
    runbook: {{ .runbook | quote }}
{{- end }}
{{- end -}}

{{/* "the counter rose within the window": an increase, or a series that appeared above zero
(a counter already raised before its first scrape shows no increase). Call with (list METRIC
SELECTOR WINDOW). */}}
{{- define "cdriver.monitoring.rose" -}}
{{- $m := printf "%s{%s}" (index . 0) (index . 1) -}}
{{- printf "(increase(%s[%s]) > 0) or (%s > 0 unless %s offset %s)" $m (index . 2) $m $m (index . 2) -}}
{{- end -}}

{{- define "cdriver.monitoring.ruleGroups" -}}
{{- $a := .Values.monitoring.alerts -}}
{{- $job := printf "job=%q" .Values.monitoring.job -}}
{{- $ctl := printf "%s, component=\"controller\"" $job -}}
{{- $plugin := printf "%s, component=\"kubelet-plugin\"" $job -}}
{{- $daemon := printf "%s, component=\"imex-daemon\"" $job -}}
{{- $prepareBoundary := "Failure boundary: allocation exists and FailedPrepareDynamicResources repeats; inspect the selected node's ComputeDomain label, daemon pod/claim, config CDI, clique entry, and local readiness in that order." -}}
{{- $sliceBoundary := "Failure boundary: no compute-domain.nvidia.com ResourceSlice/channel 0 on the node; kubelet-plugin registration, IMEX capability discovery, driver device nodes, or node targeting." -}}
{{- $cliqueBoundary := "Failure boundary: the daemon is running but its clique entry is absent/NotReady; clique ID discovery, daemon API/RBAC, peer config, nvidia-imex process, probes, or stale entry handling." -}}
{{- $apiBoundary := "Failure boundary: controller reconciliation and every role's API writes (templates, node labels, clique entries, status) lag behind." -}}
groups:
- name: cdriver.controller
  rules:
  {{- include "cdriver.monitoring.rule" (dict "a" $a.controllerDown "alert" "CdriverControllerDown" "component" "controller"
      "expr" (printf "absent(up{%s} == 1)" $ctl)
      "summary" "No cdriver controller target is up"
      "description" "No ComputeDomain controller of job cdriver answers a scrape: ComputeDomains get no workload template, daemons, status or cleanup. Failure boundary: no ComputeDomain controller or DeviceClasses; Helm wiring, resource enablement, API version, or controller startup."
      "runbook" "Run `cdriver diagnose --all` (or `kubectl cdriver diagnose --all`): its first link checks the driver installation (controller Deployment, DeviceClasses, CRDs, API version). Then read the controller pod's status and logs in the driver namespace.") | nindent 2 }}
  {{- include "cdriver.monitoring.rule" (dict "a" $a.domainNotReady "alert" "CdriverComputeDomainNotReady" "component" "controller"
      "expr" (printf "max by (namespace, domain_namespace, domain_name) (cdriver_controller_compute_domain_ready{%s}) == 0 and on () (sum(cdriver_kubelet_plugin_claims_waiting{%s}) > 0)" $ctl $plugin)
      "summary" `ComputeDomain {{ $labels.domain_namespace }}/{{ $labels.domain_name }} is NotReady while claims wait`
      "description" (print `ComputeDomain {{ $labels.domain_namespace }}/{{ $labels.domain_name }} is NotReady and kubelet plugins hold claims waiting to be prepared. ` $cliqueBoundary ` Zero daemon pods after a Prepare point at a node-label/selector mismatch after allocation.`)
      "runbook" "Run `cdriver diagnose computedomain {{ $labels.domain_name }} -n {{ $labels.domain_namespace }}`: it names the first broken link (node label, daemon DaemonSet/pod/claim, clique entry) with the node, daemon pod and clique ID.") | nindent 2 }}
  {{- include "cdriver.monitoring.rule" (dict "a" $a.staleNodeLabels "alert" "CdriverStaleNodeLabels" "component" "controller"
      "expr" (printf "max by (namespace) (cdriver_controller_stale_node_labels{%s}) > 0" $ctl)
      "summary" `{{ $value }} node(s) hold the label of a deleted ComputeDomain`
      "description" "Nodes are labelled resource.nvidia.com/computeDomain for a ComputeDomain that no longer exists (or whose cleanup finished), so the controller's cleanup did not finish. Failure boundary: ComputeDomain deletion hangs; inspect generated templates, daemon DaemonSet/claims, node labels, and finalizers before considering manual removal."
      "runbook" "List the labels with `kubectl get nodes -L resource.nvidia.com/computeDomain` against `kubectl get computedomains -A -o custom-columns=NS:.metadata.namespace,NAME:.metadata.name,UID:.metadata.uid`, run `cdriver diagnose --all`, and read the controller's logs before removing a label or finalizer by hand.") | nindent 2 }}
- name: cdriver.kubelet-plugin
  rules:
  {{- include "cdriver.monitoring.rule" (dict "a" $a.prepareWaiting "alert" "CdriverPrepareWaitingTooLong" "component" "kubelet-plugin"
      "expr" (printf "max by (namespace, node, kind) (cdriver_kubelet_plugin_oldest_waiting_claim_seconds{%s}) > %v" $plugin $a.prepareWaiting.seconds)
      "summary" `A {{ $labels.kind }} claim on node {{ $labels.node }} has waited {{ $value | humanizeDuration }} for Prepare`
      "description" (print `The kubelet plugin on {{ $labels.node }} keeps failing the Prepare of a {{ $labels.kind }} claim retryably (its node's IMEX daemon or host service is not ready). ` $prepareBoundary)
      "runbook" "`kubectl get events -A --field-selector reason=FailedPrepareDynamicResources` names the waiting pods; `cdriver diagnose pod POD -n NAMESPACE` names the first broken link on node {{ $labels.node }}.") | nindent 2 }}
  {{- include "cdriver.monitoring.rule" (dict "a" $a.prepareFailing "alert" "CdriverPrepareFailing" "component" "kubelet-plugin"
      "expr" (printf "sum by (namespace, node) (rate(cdriver_kubelet_plugin_claim_operations_total{%s, operation=\"prepare\", outcome!=\"ok\"}[%s])) / sum by (namespace, node) (rate(cdriver_kubelet_plugin_claim_operations_total{%s, operation=\"prepare\"}[%s])) > %v" $plugin $a.prepareFailing.window $plugin $a.prepareFailing.window $a.prepareFailing.ratio)
      "summary" `{{ $value | humanizePercentage }} of the Prepares on node {{ $labels.node }} fail`
      "description" (print `Most claim Prepares on {{ $labels.node }} fail (the reason label of cdriver_kubelet_plugin_claim_operations_total says why). ` $prepareBoundary)
      "runbook" "`kubectl get events -A --field-selector reason=FailedPrepareDynamicResources` names the pods; `cdriver diagnose pod POD -n NAMESPACE` names the first broken link on node {{ $labels.node }}.") | nindent 2 }}
  {{- include "cdriver.monitoring.rule" (dict "a" $a.pluginNotRegistered "alert" "CdriverKubeletPluginNotRegistered" "component" "kubelet-plugin"
      "expr" (printf "max by (namespace, node, pod) (cdriver_kubelet_plugin_registered{%s}) == 0" $plugin)
      "summary" `The kubelet plugin on node {{ $labels.node }} is not registered with kubelet`
      "description" (print `kubelet has not confirmed the registration of the compute-domain.nvidia.com plugin on {{ $labels.node }}: no claim can be prepared there. ` $sliceBoundary)
      "runbook" "Run `cdriver diagnose --all` (the ResourceSlices link), then read `kubectl -n {{ $labels.namespace }} logs {{ $labels.pod }}` and kubelet's log on {{ $labels.node }} for the plugin registration.") | nindent 2 }}
  {{- include "cdriver.monitoring.rule" (dict "a" $a.resourceSliceNotPublished "alert" "CdriverResourceSliceNotPublished" "component" "kubelet-plugin"
      "expr" (printf "max by (namespace, node, pod) (cdriver_kubelet_plugin_resourceslice_published{%s}) == 0" $plugin)
      "summary" `Node {{ $labels.node }} publishes no current compute-domain ResourceSlice`
      "description" (print `The kubelet plugin on {{ $labels.node }} has no current ResourceSlice: the scheduler cannot allocate its channels. ` $sliceBoundary)
      "runbook" "`kubectl get resourceslices --field-selector spec.nodeName={{ $labels.node }},spec.driver=compute-domain.nvidia.com`; `cdriver diagnose --all` (the ResourceSlices link); the plugin's log: `kubectl -n {{ $labels.namespace }} logs {{ $labels.pod }}`.") | nindent 2 }}
  {{- include "cdriver.monitoring.rule" (dict "a" $a.pluginGone "alert" "CdriverKubeletPluginGone" "component" "kubelet-plugin"
      "expr" (printf "max by (namespace, node) (max_over_time(up{%s}[%s])) unless max by (namespace, node) (up{%s} == 1)" $plugin $a.pluginGone.window $plugin)
      "summary" `The kubelet plugin on node {{ $labels.node }} is down or gone`
      "description" (print `Node {{ $labels.node }} had a kubelet plugin target within the last ` $a.pluginGone.window ` and has none up now (its pod was evicted, deleted, or fails). A node removed from the cluster also fires until the window passes. ` $sliceBoundary)
      "runbook" "`kubectl -n {{ $labels.namespace }} get pods -o wide --field-selector spec.nodeName={{ $labels.node }}` shows the plugin pod; `cdriver diagnose --all` names the nodes without a ResourceSlice.") | nindent 2 }}
  {{- include "cdriver.monitoring.rule" (dict "a" $a.domainLabelMissing "alert" "CdriverDomainLabelMissing" "component" "kubelet-plugin"
      "expr" (printf "max by (namespace, node) (cdriver_kubelet_plugin_domain_labels_missing{%s}) > 0" $plugin)
      "summary" `Node {{ $labels.node }} lacks the label of {{ $value }} ComputeDomain(s) it has prepared claims of`
      "description" "A channel claim is prepared on {{ $labels.node }} but the node's resource.nvidia.com/computeDomain label was removed (by hand or by someone else): the domain's IMEX daemon cannot run there. Failure boundary: driver-managed ComputeDomain has template and DaemonSet but zero daemon pods; a node-label/selector mismatch after allocation."
      "runbook" "`kubectl get node {{ $labels.node }} -L resource.nvidia.com/computeDomain`; `cdriver diagnose --all` shows the node label link of each domain with pods on {{ $labels.node }}.") | nindent 2 }}
  {{- include "cdriver.monitoring.rule" (dict "a" $a.checkpointRebuilt "alert" "CdriverCheckpointRebuilt" "component" "kubelet-plugin"
      "expr" (include "cdriver.monitoring.rose" (list "cdriver_kubelet_plugin_checkpoint_rebuilds_total" $plugin $a.checkpointRebuilt.window))
      "summary" `The kubelet plugin on node {{ $labels.node }} rebuilt its checkpoint ({{ $labels.reason }})`
      "description" "The plugin's checkpoint of prepared claims on {{ $labels.node }} was lost or damaged and rebuilt from the ResourceClaims and CDI specs. Failure boundary: another channel claim fails as already allocated; node-local checkpoint ownership of the same channel ID, inspect existing prepared claims and pod lifecycle."
      "runbook" "`kubectl get events --field-selector involvedObject.kind=Node,involvedObject.name={{ $labels.node }},reason=CheckpointRebuilt` lists what was rebuilt and any CDI spec no claim explains; `cdriver diagnose --all` checks the claims of each domain.") | nindent 2 }}
- name: cdriver.imex-daemon
  rules:
  {{- include "cdriver.monitoring.rule" (dict "a" $a.imexDaemonNotReady "alert" "CdriverImexDaemonNotReady" "component" "imex-daemon"
      "expr" (printf "max by (namespace, node, compute_domain, pod) (cdriver_imex_daemon_ready{%s}) == 0" $daemon)
      "summary" `The IMEX daemon of ComputeDomain {{ $labels.compute_domain }} on node {{ $labels.node }} is not Ready`
      "description" (print `nvidia-imex in {{ $labels.pod }} does not answer READY: the node's clique entry is NotReady and Prepares of the domain's channels on {{ $labels.node }} wait. ` $cliqueBoundary)
      "runbook" "Run `cdriver diagnose --all` (the domain of UID {{ $labels.compute_domain }}; its clique entry link shows index, IP and status), then `kubectl -n {{ $labels.namespace }} logs {{ $labels.pod }}`.") | nindent 2 }}
  {{- include "cdriver.monitoring.rule" (dict "a" $a.imexRestarting "alert" "CdriverImexRestarting" "component" "imex-daemon"
      "expr" (printf "sum without (reason) (increase(cdriver_imex_daemon_imex_restarts_total{%s}[%s])) > %v" $daemon $a.imexRestarting.window $a.imexRestarting.restarts)
      "summary" `nvidia-imex restarted {{ $value | printf "%.0f" }} times on node {{ $labels.node }}`
      "description" (print `The IMEX daemon {{ $labels.pod }} restarted nvidia-imex more than ` $a.imexRestarting.restarts ` times within ` $a.imexRestarting.window ` (the restarts counter's reason label says why). ` $cliqueBoundary)
      "runbook" "`kubectl -n {{ $labels.namespace }} logs {{ $labels.pod }}` shows nvidia-imex's exits; `cdriver diagnose --all` (the domain of UID {{ $labels.compute_domain }}) shows its clique entry and the nvidia-imex start-up Events.") | nindent 2 }}
  {{- include "cdriver.monitoring.rule" (dict "a" $a.imexStartFailing "alert" "CdriverImexStartFailing" "component" "imex-daemon"
      "expr" (printf "(%s) unless on (namespace, pod) (cdriver_imex_daemon_ready{%s} == 1)" (include "cdriver.monitoring.rose" (list "cdriver_imex_daemon_imex_start_failures_total" $daemon $a.imexStartFailing.window)) $daemon)
      "summary" `nvidia-imex fails to start on node {{ $labels.node }}`
      "description" (print `nvidia-imex in {{ $labels.pod }} could not start (it could not be spawned, or another process holds its port: the daemon's IMEXPortConflict Event names it) or exited before it answered READY. ` $cliqueBoundary)
      "runbook" "`kubectl -n {{ $labels.namespace }} logs {{ $labels.pod }}` shows nvidia-imex's output; `cdriver diagnose --all` (the domain of UID {{ $labels.compute_domain }}) names its start-up error Event.") | nindent 2 }}
- name: cdriver.api-client
  rules:
  {{- include "cdriver.monitoring.rule" (dict "a" $a.apiServerThrottling "alert" "CdriverApiServerThrottling" "component" ""
      "expr" (printf "sum by (namespace, component, pod) (rate(cdriver_api_client_requests_total{%s, code=\"429\"}[%s])) > %v" $job $a.apiServerThrottling.window $a.apiServerThrottling.perSecond)
      "summary" `The API server answers {{ $labels.pod }} ({{ $labels.component }}) with 429 Too Many Requests`
      "description" (print `API Priority and Fairness rejects requests of the {{ $labels.component }} pod {{ $labels.pod }}; its requests are retried later. ` $apiBoundary)
      "runbook" "`kubectl get flowschemas,prioritylevelconfigurations` and `kubectl get --raw /debug/api_priority_and_fairness/dump_priority_levels` show which level rejects; `cdriver diagnose --all` shows which links lag.") | nindent 2 }}
  {{- include "cdriver.monitoring.rule" (dict "a" $a.apiClientRateLimited "alert" "CdriverApiClientRateLimited" "component" ""
      "expr" (printf "sum by (namespace, component, pod) (rate(cdriver_api_client_rate_limiter_wait_seconds_total{%s}[%s])) > %v" $job $a.apiClientRateLimited.window $a.apiClientRateLimited.waitRatio)
      "summary" `{{ $labels.pod }} ({{ $labels.component }}) waits in its own API rate limiter`
      "description" (print `The requests of {{ $labels.pod }} spend {{ $value | printf "%.2f" }} s a second waiting for client-side rate-limit tokens (qps/burst). ` $apiBoundary)
      "runbook" "Raise the role's limit (chart values controller.kubeApiQps/kubeApiBurst, kubeletPlugin.kubeApiQps/kubeApiBurst); `cdriver diagnose --all` shows which links lag.") | nindent 2 }}
{{- end -}}
