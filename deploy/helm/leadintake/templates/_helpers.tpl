{{/* The chart's name, and the release's name for its objects (63 characters at most). */}}
{{- define "leadintake.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "leadintake.fullname" -}}
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

{{/* The name of one component's objects: fullname-component, cut so that it stays a valid name. */}}
{{- define "leadintake.componentName" -}}
{{- printf "%s-%s" (include "leadintake.fullname" .root | trunc (int (sub 62 (len .component)))) .component | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of one component: {root, component}. */}}
{{- define "leadintake.selectorLabels" -}}
app.kubernetes.io/name: {{ include "leadintake.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Every object's labels: {root, component}. */}}
{{- define "leadintake.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "leadintake.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: leadintake
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{/* repository:tag, or repository@digest: {repository, tag, digest} and the default tag. */}}
{{- define "leadintake.imageRef" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .defaultTag .image.tag) }}
{{- end }}
{{- end }}

{{- define "leadintake.image" -}}
{{- include "leadintake.imageRef" (dict "image" .Values.image "defaultTag" .Chart.AppVersion) }}
{{- end }}

{{/* The clients file's path in the containers. */}}
{{- define "leadintake.clientsFilePath" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.clientsFile.mountPath) .Values.clientsFile.key }}
{{- end }}

{{/* SHUTDOWN_TIMEOUT as the processes read it. */}}
{{- define "leadintake.shutdownTimeout" -}}
{{- printf "%ds" (int .Values.shutdownTimeoutSeconds) }}
{{- end }}

{{/* terminationGracePeriodSeconds of a pod: SHUTDOWN_TIMEOUT, the preStop pause {root, preStop} and the margin. */}}
{{- define "leadintake.gracePeriod" -}}
{{- add (int .root.Values.shutdownTimeoutSeconds) (int .preStop) (int .root.Values.gracePeriodMarginSeconds) }}
{{- end }}

{{/* A secretKeyRef environment variable: {env, name, key, optional}. */}}
{{- define "leadintake.secretEnv" -}}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ .name | quote }}
      key: {{ .key | quote }}
      {{- if .optional }}
      optional: true
      {{- end }}
{{- end }}

{{/*
The environment both processes share: secrets, SHUTDOWN_TIMEOUT, the clients
file, then config with the component's own env over it: {root, env}.
*/}}
{{- define "leadintake.commonEnv" -}}
{{- $v := .root.Values }}
{{- $s := $v.secrets }}
{{ include "leadintake.secretEnv" (dict "env" "DATABASE_URL" "name" $s.databaseURL.name "key" $s.databaseURL.key) }}
{{ include "leadintake.secretEnv" (dict "env" "PII_HASH_KEY" "name" $s.piiHashKey.name "key" $s.piiHashKey.key) }}
{{- if $s.admin.name }}
{{ include "leadintake.secretEnv" (dict "env" "ADMIN_USER" "name" $s.admin.name "key" $s.admin.userKey) }}
{{ include "leadintake.secretEnv" (dict "env" "ADMIN_PASSWORD" "name" $s.admin.name "key" $s.admin.passwordKey) }}
{{- end }}
{{- if $s.metrics.name }}
{{ include "leadintake.secretEnv" (dict "env" "METRICS_USER" "name" $s.metrics.name "key" $s.metrics.userKey) }}
{{ include "leadintake.secretEnv" (dict "env" "METRICS_PASSWORD" "name" $s.metrics.name "key" $s.metrics.passwordKey) }}
{{- end }}
{{- if $v.clientsFile.secretName }}
- name: CLIENTS_FILE
  value: {{ include "leadintake.clientsFilePath" .root | quote }}
{{- end }}
- name: SHUTDOWN_TIMEOUT
  value: {{ include "leadintake.shutdownTimeout" .root | quote }}
{{- range $k, $val := merge (deepCopy (.env | default dict)) $v.config }}
- name: {{ $k }}
  value: {{ $val | quote }}
{{- end }}
{{- end }}

{{/* The clients file's volume, read-only, updated in place by the kubelet (no subPath: a subPath mount never changes). */}}
{{- define "leadintake.clientsVolume" -}}
- name: clients
  secret:
    secretName: {{ .Values.clientsFile.secretName | quote }}
    defaultMode: 0440
    items:
      - key: {{ .Values.clientsFile.key | quote }}
        path: {{ .Values.clientsFile.key | quote }}
{{- end }}

{{- define "leadintake.clientsMount" -}}
- name: clients
  mountPath: {{ .Values.clientsFile.mountPath | quote }}
  readOnly: true
{{- end }}

{{/*
The pod annotation that rolls a Deployment's pods when the clients file
changes: a checksum of the Secret's data as Helm reads it at install and
upgrade (lookup; nothing under `helm template`) and of clientsFile.revision.
A change to the Secret reaches the processes by a rollout rather than a
SIGHUP from a container beside them, which would have to share the pod's
process namespace and could then read the process's environment (the
database URL, PII_HASH_KEY, the admin password) and files.
*/}}
{{- define "leadintake.clientsChecksum" -}}
{{- $secret := lookup "v1" "Secret" .Release.Namespace .Values.clientsFile.secretName }}
{{- printf "%s\n%s" (toJson (dig "data" dict $secret)) (toString .Values.clientsFile.revision) | sha256sum }}
{{- end }}

{{/* Who may reach a component's admin port, as NetworkPolicy peers: the monitoring namespaces and the release's own pods. */}}
{{- define "leadintake.adminPeers" -}}
{{- $a := .Values.networkPolicy.admin -}}
- namespaceSelector:
    {{- toYaml $a.namespaceSelector | nindent 4 }}
  {{- with $a.podSelector }}
  podSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
- podSelector:
    matchLabels:
      app.kubernetes.io/name: {{ include "leadintake.name" . }}
      app.kubernetes.io/instance: {{ .Release.Name }}
{{- with $a.extraFrom }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* A soft spread of one component's pods over nodes: {root, component}. */}}
{{- define "leadintake.spread" -}}
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- include "leadintake.selectorLabels" . | nindent 6 }}
{{- end }}

{{/* The scrape job of a component's admin listener, as deploy/prometheus/alerts.yml names it. */}}
{{- define "leadintake.scrapeJob" -}}
leadintake-{{ . }}
{{- end }}

{{/*
Checks of values that the schema cannot make: the api's clients, the
ServiceMonitor's credential, and the database's connection budget.
*/}}
{{- define "leadintake.checks" -}}
{{- if not (or .Values.clientsFile.secretName .Values.secrets.apiClients.name) }}
{{- fail "the api needs its clients: set clientsFile.secretName, secrets.apiClients.name, or both" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled .Values.secrets.admin.name (not .Values.secrets.metrics.name) }}
{{- fail "metrics.serviceMonitor needs secrets.metrics (METRICS_USER and METRICS_PASSWORD, which open /metrics alone): Prometheus must not hold the admin credential, which opens River UI, erasures and redrives" }}
{{- end }}
{{- $pg := .Values.postgres }}
{{- if gt (int $pg.maxConnections) 0 }}
{{- $api := ternary .Values.api.autoscaling.maxReplicas .Values.api.replicas .Values.api.autoscaling.enabled | int }}
{{- $worker := ternary .Values.worker.autoscaling.maxReplicas .Values.worker.replicas .Values.worker.autoscaling.enabled | int }}
{{- $need := add (mul (add $api 1) (int $pg.connectionsPerPod.api)) (mul (add $worker 1) (int $pg.connectionsPerPod.worker)) (ternary (int $pg.connectionsPerPod.migrate) 0 .Values.migrations.enabled) }}
{{- if gt (int $need) (int $pg.maxConnections) }}
{{- fail (printf "the pools may open %d connections (api: %d pods x %d, worker: %d pods x %d, a surge pod each, migrations: %d), over postgres.maxConnections %d: lower the replicas or pool_max_conns, or raise max_connections" (int $need) (add $api 1) (int $pg.connectionsPerPod.api) (add $worker 1) (int $pg.connectionsPerPod.worker) (ternary (int $pg.connectionsPerPod.migrate) 0 .Values.migrations.enabled) (int $pg.maxConnections)) }}
{{- end }}
{{- end }}
{{- end }}
