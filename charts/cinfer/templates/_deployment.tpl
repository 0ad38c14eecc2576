{{/*
Deployment of one program; call with
  (dict "ctx" $ "component" "operator" "args" (list "--workers=2" ...))
The component's values live at .Values.<component>. The router has no leader election (it is
stateless) and serves its OpenAI API on a second port.
*/}}
{{- define "cinfer.deployment" -}}
{{- $v := index .ctx.Values .component -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "cinfer.componentName" . }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "cinfer.componentLabels" . | nindent 4 }}
spec:
  replicas: {{ $v.replicas }}
  selector:
    matchLabels:
      {{- include "cinfer.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "cinfer.componentLabels" . | nindent 8 }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        kubectl.kubernetes.io/default-container: {{ .component }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "cinfer.serviceAccountName" . }}
      automountServiceAccountToken: true
      {{- with $v.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- include "cinfer.podSecurityContext" . | nindent 8 }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if eq .component "router" }}
      terminationGracePeriodSeconds: {{ add $v.shutdownDelaySeconds $v.shutdownTimeoutSeconds 5 }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ include "cinfer.image" (dict "ctx" .ctx "image" $v.image) | quote }}
          imagePullPolicy: {{ $v.image.pullPolicy }}
          args:
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
            {{- with .ctx.Values.watchNamespaces }}
            - {{ printf "--namespace=%s" (join "," .) | quote }}
            {{- end }}
            {{- if ne .component "router" }}
            - {{ printf "--leader-elect=%t" (or $v.leaderElect (gt (int $v.replicas) 1)) | quote }}
            - {{ printf "--leader-election-namespace=%s" .ctx.Release.Namespace | quote }}
            {{- end }}
            - {{ printf "--probe-addr=0.0.0.0:%d" (int $v.probePort) | quote }}
            - {{ printf "--log-level=%s" $v.logLevel | quote }}
            - {{ printf "--log-format=%s" $v.logFormat | quote }}
            {{- range $v.extraArgs }}
            - {{ . | quote }}
            {{- end }}
          {{- with $v.extraEnv }}
          env:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          ports:
            {{- if eq .component "router" }}
            - name: http
              containerPort: {{ $v.port }}
              protocol: TCP
            {{- end }}
            - name: http-metrics
              containerPort: {{ $v.probePort }}
              protocol: TCP
          livenessProbe:
            httpGet:
              path: /healthz
              port: http-metrics
            initialDelaySeconds: 5
            periodSeconds: 10
            timeoutSeconds: 2
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /readyz
              port: http-metrics
            periodSeconds: 5
            timeoutSeconds: 2
            failureThreshold: 3
          {{- with $v.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            {{- include "cinfer.containerSecurityContext" . | nindent 12 }}
{{- end -}}
