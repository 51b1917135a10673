{{/* Chart name, overridable with nameOverride. */}}
{{- define "idemgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: the release name when it already contains the
chart name, else release-chart; 63 characters at most (DNS label).
*/}}
{{- define "idemgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "idemgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels common to every object. */}}
{{- define "idemgate.labels" -}}
helm.sh/chart: {{ include "idemgate.chart" . }}
app.kubernetes.io/name: {{ include "idemgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of the proxy pods (component keeps the demo Valkey out). */}}
{{- define "idemgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "idemgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: proxy
{{- end }}

{{/* Selector labels of the demo Valkey pod. */}}
{{- define "idemgate.valkey.selectorLabels" -}}
app.kubernetes.io/name: {{ include "idemgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: valkey
{{- end }}

{{- define "idemgate.valkey.fullname" -}}
{{- printf "%s-valkey" (include "idemgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "idemgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "idemgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The config.yaml idemgate runs with: .Values.config, with the store pointed
at the chart's Valkey when valkey.enabled.
*/}}
{{- define "idemgate.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- if .Values.valkey.enabled }}
{{- $store := default dict $cfg.store }}
{{- $vk := default dict $store.valkey }}
{{- $_ := set $vk "addrs" (list (printf "%s:6379" (include "idemgate.valkey.fullname" .))) }}
{{- $_ := set $vk "sentinel_master" "" }}
{{- $_ := set $store "valkey" $vk }}
{{- $_ := set $store "driver" "valkey" }}
{{- $_ := set $cfg "store" $store }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/*
Checksum of the part of the config that idemgate reads only at start:
everything but defaults and routes, which it hot reloads. A change here rolls
the pods; a policy change reaches them through the mounted ConfigMap.
*/}}
{{- define "idemgate.restartChecksum" -}}
{{- omit (include "idemgate.config" . | fromYaml) "defaults" "routes" | toYaml | sha256sum }}
{{- end }}

{{/* The port of a listen address such as ":8080" or "0.0.0.0:8080". */}}
{{- define "idemgate.port" -}}
{{- regexReplaceAll "^.*:" (toString .) "" }}
{{- end }}

{{/* The store driver idemgate runs with. */}}
{{- define "idemgate.storeDriver" -}}
{{- if .Values.valkey.enabled }}valkey{{ else }}{{ (.Values.config.store | default dict).driver | default "memory" }}{{ end }}
{{- end }}

{{/*
Seconds of a duration written as "35s", "2m" or "1m30s"; "" when it has
another form (then the grace-period guard cannot check it).
*/}}
{{- define "idemgate.seconds" -}}
{{- $d := toString . }}
{{- if regexMatch "^([0-9]+m)?([0-9]+s)?$" $d }}
{{- $m := regexFind "[0-9]+m" $d | trimSuffix "m" | default "0" | int }}
{{- $s := regexFind "[0-9]+s" $d | trimSuffix "s" | default "0" | int }}
{{- add (mul $m 60) $s }}
{{- end }}
{{- end }}
