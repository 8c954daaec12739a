{{/*
nvidia-imex settings operators tune (imex.daemonConfig.*), as the kubelet plugin's environment:
it fills them into the IMEX config template it places for every domain's daemons. Each entry:
the value's name, the plugin's variable, upstream's default, the accepted values (integer
range or words) and their description. The kubelet plugin checks them again at start
(cdriver/imex/settings.py holds the same table).
*/}}
{{- define "cdriver.imexDaemonConfigTable" -}}
{{- list
  (dict "name" "nodeDisconnectedGraceTime" "env" "IMEX_NODE_DISCONNECTED_GRACE_TIME" "default" "-1"
        "min" -1 "max" 2147483647
        "allowed" "-1 (wait indefinitely), 0 (clean up at once) or seconds from 1 to 2147483647")
  (dict "name" "logLevel" "env" "IMEX_LOG_LEVEL" "default" "4" "min" 0 "max" 4
        "allowed" "an integer from 0 (logging off) to 4 (INFO and above)")
  (dict "name" "waitForQuorum" "env" "IMEX_WAIT_FOR_QUORUM" "default" "RECOVERY" "choices" (list "RECOVERY" "NONE")
        "allowed" "RECOVERY (after an unsafe stop, wait for the nodes that had imported) or NONE")
  | toJson -}}
{{- end -}}

{{/* The env entries; `helm template` fails naming the value, what it accepts and its default. */}}
{{- define "cdriver.imexDaemonConfigEnv" -}}
{{- $given := .Values.imex.daemonConfig | default dict -}}
{{- $hostManaged := include "cdriver.hostManaged" . -}}
{{- range include "cdriver.imexDaemonConfigTable" . | fromJsonArray }}
{{- $path := printf "imex.daemonConfig.%s" .name -}}
{{- $raw := .default -}}
{{- if hasKey $given .name -}}{{- $raw = index $given .name -}}{{- end -}}
{{- $text := toString $raw -}}
{{- $bad := printf "%s=%s is not valid: use %s (default %s)" $path (toJson $raw) .allowed .default -}}
{{- if hasKey . "choices" -}}
{{- if not (has $text .choices) -}}{{- fail $bad -}}{{- end -}}
{{- else -}}
{{- if kindIs "float64" $raw -}}
{{- if ne (float64 (int64 $raw)) $raw -}}{{- fail $bad -}}{{- end -}}
{{- $text = int64 $raw | toString -}}
{{- end -}}
{{- if not (regexMatch "^-?(0|[1-9][0-9]{0,18})$" $text) -}}{{- fail $bad -}}{{- end -}}
{{- if or (lt (int64 $text) (int64 .min)) (gt (int64 $text) (int64 .max)) -}}{{- fail $bad -}}{{- end -}}
{{- end -}}
{{- if and $hostManaged (ne $text .default) -}}
{{- fail (printf "%s=%s applies to the IMEX daemons the driver runs: with imex.mode=hostManaged set it in the host's nvidia-imex config and remove %s" $path $text $path) -}}
{{- end }}
- name: {{ .env }}
  value: {{ $text | quote }}
{{- end -}}
{{- end -}}
