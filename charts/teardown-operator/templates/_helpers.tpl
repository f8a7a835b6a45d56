{{/*
The name of the chart's objects: the release name, or the release name and the chart's name when
the release name does not contain it; at most 63 characters. nameOverride replaces the chart's
name, fullnameOverride the whole.
*/}}
{{- define "teardown-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "teardown-operator.fullname" -}}
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

{{/* Labels on every object of the chart: the operator's pods' labels, and its versions. */}}
{{- define "teardown-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{ include "teardown-operator.podLabels" . }}
{{- end }}

{{/*
Labels on the operator's pods. None comes from the chart's version or appVersion: a change of the
pod template rolls the Deployment, and upgrading the chart alone must not restart the operator
(its image, which says which operator runs, is in the template).
*/}}
{{- define "teardown-operator.podLabels" -}}
{{ include "teardown-operator.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: teardown-operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels that select the operator's pods. */}}
{{- define "teardown-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "teardown-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The operator's ServiceAccount. */}}
{{- define "teardown-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "teardown-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator's image: repository, then @digest or :tag (the chart's appVersion by default). */}}
{{- define "teardown-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The namespace of TeardownRuns of cluster-scoped targets (and of the leader election lease). */}}
{{- define "teardown-operator.runNamespace" -}}
{{- default .Release.Namespace .Values.operator.runNamespace }}
{{- end }}

{{/*
A name made of the full name and a suffix, at most 63 characters with the suffix kept (Service
and Job names must be DNS labels): include "teardown-operator.suffixed" (list . "metrics").
*/}}
{{- define "teardown-operator.suffixed" -}}
{{- $ctx := index . 0 }}
{{- $suffix := index . 1 }}
{{- printf "%s-%s" (include "teardown-operator.fullname" $ctx | trunc (int (sub 62 (len $suffix))) | trimSuffix "-") $suffix }}
{{- end }}

{{/*
The pods' affinity: the affinity value and, unless it has a podAntiAffinity of its own, or
topologySpreadConstraints are given, or spreadReplicas is false, a preference for the replicas on
different nodes, so that one node going down does not take every replica with it. Preferred, not
required: a one-node cluster still runs them all, and a rolling update never waits for a free node.
*/}}
{{- define "teardown-operator.affinity" -}}
{{- $affinity := deepCopy .Values.affinity }}
{{- if and .Values.spreadReplicas (not $affinity.podAntiAffinity) (not .Values.topologySpreadConstraints) }}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "teardown-operator.selectorLabels" . | fromYaml)) }}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) }}
{{- end }}
{{- with $affinity }}{{ toYaml . }}{{ end }}
{{- end }}
