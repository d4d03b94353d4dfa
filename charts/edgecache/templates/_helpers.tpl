{{/* Chart name, overridable. */}}
{{- define "edgecache.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: RELEASE-edgecache, or RELEASE when it already contains the chart name. */}}
{{- define "edgecache.fullname" -}}
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

{{- define "edgecache.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of the operator pod (immutable once installed). */}}
{{- define "edgecache.selectorLabels" -}}
app.kubernetes.io/name: {{ include "edgecache.name" . }}-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels on every object of the chart. */}}
{{- define "edgecache.commonLabels" -}}
helm.sh/chart: {{ include "edgecache.chart" . }}
app.kubernetes.io/part-of: edgecache
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels on the operator's objects. */}}
{{- define "edgecache.labels" -}}
{{ include "edgecache.commonLabels" . }}
{{ include "edgecache.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Replicas of the operator Deployment (one: no leader election); the helm test waits for them. */}}
{{- define "edgecache.replicas" -}}
1
{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "edgecache.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "edgecache.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image reference: repository:tag (tag defaults to appVersion), or repository@digest. */}}
{{- define "edgecache.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if eq $tag "latest" }}
{{- fail "image.tag: \"latest\" is not allowed; pin a version (kind load and IfNotPresent need a fixed tag)" }}
{{- end }}
{{- if hasPrefix "sha256:" $tag }}
{{- printf "%s@%s" .Values.image.repository $tag }}
{{- else if hasPrefix "@" $tag }}
{{- printf "%s%s" .Values.image.repository $tag }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}
