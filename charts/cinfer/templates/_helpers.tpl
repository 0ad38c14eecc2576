{{/* Chart name, truncated to the 63 characters a label value may hold. */}}
{{- define "cinfer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified name: fullnameOverride, else <release>-<name> (just <release> if it contains the name). */}}
{{- define "cinfer.fullname" -}}
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

{{- define "cinfer.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "cinfer.labels" -}}
helm.sh/chart: {{ include "cinfer.chart" . }}
app.kubernetes.io/name: {{ include "cinfer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cinfer
{{- end -}}

{{/* Labels of one component; call with (dict "ctx" $ "component" "operator"). */}}
{{- define "cinfer.componentLabels" -}}
{{ include "cinfer.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Selector labels of one component (immutable in a Deployment: keep them minimal). */}}
{{- define "cinfer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cinfer.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Name of a component's objects: <fullname>-<component>. */}}
{{- define "cinfer.componentName" -}}
{{- printf "%s-%s" (include "cinfer.fullname" .ctx) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* ServiceAccount of a component. */}}
{{- define "cinfer.serviceAccountName" -}}
{{- $v := index .ctx.Values .component -}}
{{- if $v.serviceAccount.create -}}
{{- default (include "cinfer.componentName" .) $v.serviceAccount.name -}}
{{- else -}}
{{- default "default" $v.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* image reference of a component: repository:tag, tag defaulting to appVersion. */}}
{{- define "cinfer.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* Pod securityContext shared by both programs. */}}
{{- define "cinfer.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Container securityContext shared by both programs. */}}
{{- define "cinfer.containerSecurityContext" -}}
runAsNonRoot: true
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
