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

{{/* Whether the pods run the clients file's reloader. */}}
{{- define "leadintake.reload" -}}
{{- if and .Values.clientsFile.secretName .Values.clientsFile.reload.enabled }}true{{ end }}
{{- end }}

{{/*
The reloader: it compares the clients file every RELOAD_INTERVAL seconds and
sends RELOAD_TARGET (the process beside it, seen through the pod's shared
process namespace) SIGHUP when it changed; the process reads the file again,
refusing a bad one with a log line. The kubelet swaps a changed Secret in
atomically, so the file is never read half written. POSIX sh, with
sha256sum, pidof, kill and sleep (busybox has them all).
*/}}
{{- define "leadintake.reloadScript" -}}
trap 'exit 0' TERM INT
sum() { sha256sum "$CLIENTS_FILE" 2>/dev/null; }
last=$(sum)
echo "watching $CLIENTS_FILE every ${RELOAD_INTERVAL}s for $RELOAD_TARGET"
while :; do
  sleep "$RELOAD_INTERVAL" & wait $!
  now=$(sum)
  [ "$now" = "$last" ] && continue
  if pids=$(pidof "$RELOAD_TARGET") && kill -HUP $pids; then
    echo "clients file changed: SIGHUP sent to $RELOAD_TARGET"
    last=$now
  else
    echo "clients file changed: no $RELOAD_TARGET process took SIGHUP; trying again"
  fi
done
{{- end }}

{{/* The reloader container: {root, target}. */}}
{{- define "leadintake.reloadContainer" -}}
{{- $r := .root.Values.clientsFile.reload }}
- name: clients-reload
  image: {{ include "leadintake.imageRef" (dict "image" $r.image "defaultTag" "latest") | quote }}
  imagePullPolicy: {{ $r.image.pullPolicy }}
  command: ["sh", "-c"]
  args:
    - |
      {{- include "leadintake.reloadScript" . | nindent 6 }}
  env:
    - name: CLIENTS_FILE
      value: {{ include "leadintake.clientsFilePath" .root | quote }}
    - name: RELOAD_TARGET
      value: {{ .target | quote }}
    - name: RELOAD_INTERVAL
      value: {{ $r.intervalSeconds | int | toString | quote }}
  volumeMounts:
    {{- include "leadintake.clientsMount" .root | nindent 4 }}
  securityContext:
    {{- toYaml .root.Values.securityContext | nindent 4 }}
  resources:
    {{- toYaml $r.resources | nindent 4 }}
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
Checks of values that the schema cannot make: the api's clients, and the
database's connection budget.
*/}}
{{- define "leadintake.checks" -}}
{{- if not (or .Values.clientsFile.secretName .Values.secrets.apiClients.name) }}
{{- fail "the api needs its clients: set clientsFile.secretName, secrets.apiClients.name, or both" }}
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
