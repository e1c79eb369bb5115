{{/* The chart's name, full name and labels. */}}
{{- define "lush.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "lush.fullname" -}}
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

{{- define "lush.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "lush.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "lush.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lush.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "lush.xdsSelectorLabels" -}}
app.kubernetes.io/name: {{ include "lush.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: xds
{{- end -}}

{{- define "lush.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "lush.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image: by digest when one is given, else by tag (default the appVersion). */}}
{{- define "lush.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The bundled PostgreSQL's Service name (the subchart's fullname). */}}
{{- define "lush.postgresqlHost" -}}
{{- printf "%s-postgresql" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Whether config.auth names a way to authenticate people (lushctl serve needs one). */}}
{{- define "lush.hasAuth" -}}
{{- $auth := get (.Values.config | default dict) "auth" | default dict -}}
{{- if or $auth.jwt $auth.api_keys $auth.trusted_proxy $auth.oauth -}}true{{- end -}}
{{- end -}}

{{/* Whether the decision log is in PostgreSQL (shared by replicas). */}}
{{- define "lush.hasPostgres" -}}
{{- if or .Values.postgresql.enabled .Values.database.existingSecret -}}true{{- end -}}
{{- end -}}

{{/*
The private keys that go through the keys init container: Kubernetes makes Secret files
group-readable under fsGroup, and Lush refuses a private key that others can read, so each is
copied to a memory emptyDir with mode 0600. A list of [name, secret, key, file].
*/}}
{{- define "lush.privateKeys" -}}
{{- $keys := list -}}
{{- with .Values.secrets.sessionKey }}{{ if .existingSecret }}{{ $keys = append $keys (list "session" .existingSecret .key "session.key") }}{{ end }}{{ end -}}
{{- with .Values.secrets.delegationKey }}{{ if .existingSecret }}{{ $keys = append $keys (list "delegation" .existingSecret .key "delegation.pem") }}{{ end }}{{ end -}}
{{- with .Values.secrets.checkpointKey }}{{ if .existingSecret }}{{ $keys = append $keys (list "checkpoint" .existingSecret .key "checkpoint.pem") }}{{ end }}{{ end -}}
{{- if .Values.bundle.enabled }}{{ with .Values.bundle.token }}{{ if .existingSecret }}{{ $keys = append $keys (list "bundle-token" .existingSecret .key "bundle.token") }}{{ end }}{{ end }}{{ end -}}
{{- toJson $keys -}}
{{- end -}}

{{/* The gateway config: .Values.config with what the chart manages set in it. */}}
{{- define "lush.gatewayConfig" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- if not (include "lush.hasAuth" .) -}}
{{- $_ := set $cfg "auth" (dict "api_keys" (list (dict "name" "placeholder-no-one-has-this-key" "sha256" (repeat 64 "0") "principal" "serviceaccount:placeholder"))) -}}
{{- end -}}
{{- if .Values.secrets.sessionKey.existingSecret -}}
{{- $_ := set $cfg "session_key_file" "/var/run/lush/keys/session.key" -}}
{{- end -}}
{{- $chain := get $cfg "decision_log_chain" | default dict -}}
{{- if .Values.secrets.checkpointKey.existingSecret -}}
{{- $_ := set $chain "checkpoint_key" "/var/run/lush/keys/checkpoint.pem" -}}
{{- else if not (hasKey $chain "checkpoint_key") -}}
{{- $_ := set $chain "checkpoint_key" "/var/lib/lush/checkpoint.pem" -}}
{{- end -}}
{{- $_ := set $cfg "decision_log_chain" $chain -}}
{{- if .Values.vault.enabled -}}
{{- $creds := get $cfg "credentials" | default dict -}}
{{- $vault := dict "address" .Values.vault.address "users" .Values.vault.users -}}
{{- with .Values.vault.namespace }}{{ $_ := set $vault "namespace" . }}{{ end -}}
{{- with .Values.vault.path }}{{ $_ := set $vault "path" . }}{{ end -}}
{{- if or .Values.vault.caCert.existingSecret .Values.vault.caCert.existingConfigMap -}}
{{- $_ := set $vault "ca_cert" "/etc/lush/vault-ca/ca.crt" -}}
{{- end -}}
{{- $_ := set $vault "auth" (dict "method" "kubernetes" "role" .Values.vault.role "mount" .Values.vault.mount "jwt_file" "/var/run/secrets/lush/vault/token") -}}
{{- $_ := set $creds "vault" $vault -}}
{{- $_ := set $cfg "credentials" $creds -}}
{{- end -}}
{{- if .Values.extAuthz.enabled -}}
{{- $ea := get $cfg "ext_authz" | default dict -}}
{{- $_ := set $ea "tls" (dict "cert_file" "/etc/lush/ext-authz/tls.crt" "key_file" "/etc/lush/ext-authz/tls.key" "client_ca_file" "/etc/lush/ext-authz/ca.crt") -}}
{{- with .Values.extAuthz.identity }}{{ $_ := set $ea "identity" . }}{{ end -}}
{{- $_ := set $cfg "ext_authz" $ea -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Checks no schema can express; each failure names the values to change. */}}
{{- define "lush.validate" -}}
{{- $replicas := int .Values.replicaCount -}}
{{- if .Values.autoscaling.enabled }}{{ $replicas = int .Values.autoscaling.maxReplicas }}{{ end -}}
{{- if and (gt $replicas 1) (not (include "lush.hasPostgres" .)) -}}
{{- fail "replicaCount (or autoscaling.maxReplicas) > 1 needs a shared PostgreSQL: set database.existingSecret (a Secret holding the postgres:// URL) or postgresql.enabled; otherwise every replica keeps its own decision log and fires every loop" -}}
{{- end -}}
{{- if and .Values.postgresql.enabled .Values.database.existingSecret -}}
{{- fail "postgresql.enabled and database.existingSecret are both set: use the bundled PostgreSQL or an external one, not both" -}}
{{- end -}}
{{- if and .Values.state.persistence.enabled (gt $replicas 1) -}}
{{- fail "state.persistence.enabled is for one replica (a ReadWriteOnce volume): with several, keep the state in PostgreSQL and leave persistence off" -}}
{{- end -}}
{{- with .Values.podDisruptionBudget -}}
{{- if and .enabled (eq (toString .minAvailable) "") (eq (toString .maxUnavailable) "") -}}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable (an integer or a percentage), or enabled: false" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.bundle.enabled .Values.project.build -}}
{{- fail "project.build and bundle.enabled are both set: builds come from the bundle server; pin one by publishing it there (docs/deploy.md#rollback-by-hash)" -}}
{{- end -}}
{{- if and .Values.xds.enabled (not .Values.extAuthz.enabled) -}}
{{- fail "xds.enabled needs extAuthz.enabled: the sidecars the xDS server configures ask Lush's ext_authz" -}}
{{- end -}}
{{- range .Values.extraEnv -}}
{{- if and (hasKey . "value") (regexMatch "(?i)(password|passwd|secret|token|api_?key|private|credential)" .name) -}}
{{- fail (printf "extraEnv %s: looks like a secret and has an inline value: take it from a Secret (valueFrom.secretKeyRef), never from values" .name) -}}
{{- end -}}
{{- end -}}
{{- $cfgJSON := toJson (.Values.config | default dict) -}}
{{- range regexFindAll "\"[a-z_]*(secret|password|passwd|token)[a-z_]*\":" $cfgJSON -1 -}}
{{- if not (or (hasSuffix "_file\":" .) (hasPrefix "\"token_endpoint\"" .) (hasPrefix "\"token_exchange\"" .)) -}}
{{- fail (printf "config: %s looks like a secret written into the gateway config: the config names files (e.g. %s_file) mounted from Secrets, never the value itself" (trimSuffix ":" .) (trimSuffix "\":" . | trimPrefix "\"")) -}}
{{- end -}}
{{- end -}}
{{- if regexMatch "postgres(ql)?://[^/@\"]*:[^/@\"]*@" $cfgJSON -}}
{{- fail "config: a postgres:// URL with a password is written into the gateway config: put the URL in a Secret and name it in database.existingSecret" -}}
{{- end -}}
{{- if hasKey (.Values.config | default dict) "decision_log" -}}
{{- fail "config.decision_log: the chart sets the decision log (LUSH_DECISION_LOG): use database.existingSecret or postgresql.enabled" -}}
{{- end -}}
{{- end -}}
