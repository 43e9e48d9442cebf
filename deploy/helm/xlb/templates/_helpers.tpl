{{- /* SPDX-License-Identifier: Apache-2.0 */ -}}
{{/*
xlb.labels: the labels of every object: the chart's, and commonLabels. No release name or
managed-by: deploy/*.yaml, applied with kubectl, are rendered from this chart too (helm tracks
its releases by annotations of its own).
*/}}
{{- define "xlb.labels" -}}
app.kubernetes.io/name: xlb
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
xlb.image: the image both parts run, its tag defaulting to the chart's appVersion.
*/}}
{{- define "xlb.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
xlb.gatewayConfig: the configuration file of one gateway: gateway.config, with
gateway.interfaces as its interfaces and leaderElection.namespace defaulting to the release's,
and the node's entry of gateway.nodes (dict "root" $ "node" ENTRY) merged over it.
*/}}
{{- define "xlb.gatewayConfig" -}}
{{- $root := .root -}}
{{- $base := deepCopy $root.Values.gateway.config -}}
{{- if $root.Values.gateway.interfaces -}}
{{- $_ := set $base "interfaces" (deepCopy $root.Values.gateway.interfaces) -}}
{{- end -}}
{{- $cfg := mergeOverwrite $base (deepCopy (.node | default dict)) -}}
{{- if not $cfg.interfaces -}}
{{- fail "gateway: no interfaces: set gateway.interfaces, or interfaces in every entry of gateway.nodes" -}}
{{- end -}}
{{- /* An empty list of pools is xlb's error; no key means the AddressPool objects alone. */ -}}
{{- if and (hasKey $cfg "pools") (not $cfg.pools) -}}
{{- $_ := unset $cfg "pools" -}}
{{- end -}}
{{- $kube := $cfg.kubernetes | default dict -}}
{{- $le := $kube.leaderElection | default dict -}}
{{- if not $le.namespace -}}
{{- $_ := set $le "namespace" $root.Release.Namespace -}}
{{- end -}}
{{- $_ := set $kube "leaderElection" $le -}}
{{- $_ := set $cfg "kubernetes" $kube -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/*
xlb.listenPort: the port of a host:port listen address ("" when it is empty).
*/}}
{{- define "xlb.listenPort" -}}
{{- if . -}}{{ splitList ":" . | last }}{{- end -}}
{{- end -}}

{{/*
xlb.listenHost: the host of a host:port listen address, for an HTTP probe: its loopback
address when it listens on every address.
*/}}
{{- define "xlb.listenHost" -}}
{{- $h := trimSuffix (printf ":%s" (include "xlb.listenPort" .)) . | trimPrefix "[" | trimSuffix "]" -}}
{{- if or (eq $h "") (eq $h "0.0.0.0") -}}127.0.0.1{{- else if eq $h "::" -}}::1{{- else -}}{{ $h }}{{- end -}}
{{- end -}}

{{/*
xlb.leaseNamespace: where the gateways hold their leader election Lease: the configuration's
kubernetes.leaderElection.namespace, else the release's namespace.
*/}}
{{- define "xlb.leaseNamespace" -}}
{{- $kube := .Values.gateway.config.kubernetes | default dict -}}
{{- $le := $kube.leaderElection | default dict -}}
{{- $le.namespace | default .Release.Namespace -}}
{{- end -}}
