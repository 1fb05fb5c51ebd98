{{/* vim: set filetype=mustache: */}}

{{- define "kmilvus.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kmilvus.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kmilvus.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels; call with (dict "ctx" $ "component" "proxy"). */}}
{{- define "kmilvus.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kmilvus.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{/* Common labels; call with (dict "ctx" $ "component" "proxy"). */}}
{{- define "kmilvus.labels" -}}
helm.sh/chart: {{ include "kmilvus.chart" .ctx }}
{{ include "kmilvus.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: kmilvus
{{- end -}}

{{- define "kmilvus.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "kmilvus.sparkImage" -}}
{{- printf "%s:%s" .Values.spark.image.repository (default .Chart.AppVersion .Values.spark.image.tag) -}}
{{- end -}}

{{- define "kmilvus.cluster" -}}
{{- default (include "kmilvus.fullname" .) .Values.cluster -}}
{{- end -}}

{{- define "kmilvus.operatorServiceAccountName" -}}
{{- if .Values.operator.serviceAccount.create -}}
{{- default (printf "%s-operator" (include "kmilvus.fullname" .)) .Values.operator.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.operator.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kmilvus.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kmilvus.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kmilvus.peeringName" -}}
{{- default (include "kmilvus.fullname" .) .Values.operator.peering.name -}}
{{- end -}}

{{/* The namespaces the operator serves (a list; the release namespace when none is given). */}}
{{- define "kmilvus.watchNamespaces" -}}
{{- $nss := .Values.operator.watchNamespaces | default (list .Release.Namespace) | uniq -}}
{{- toJson $nss -}}
{{- end -}}

{{/* Where Collections created through pymilvus appear as resources. */}}
{{- define "kmilvus.sdkNamespace" -}}
{{- .Values.operator.sdkNamespace | default (first (include "kmilvus.watchNamespaces" . | fromJsonArray)) -}}
{{- end -}}

{{/* Namespaces that get the Spark driver service account (and the in-chart MinIO credentials):
the served ones, plus spark.namespaces (Collections' namespaces of a cluster-wide operator). */}}
{{- define "kmilvus.sparkNamespaces" -}}
{{- $served := .Values.operator.clusterWide | ternary (list .Release.Namespace) (include "kmilvus.watchNamespaces" . | fromJsonArray) -}}
{{- concat $served (.Values.spark.namespaces | default list) | uniq | toJson -}}
{{- end -}}

{{- define "kmilvus.etcdEndpoint" -}}
{{- if .Values.etcd.enabled -}}
{{- printf "%s-etcd.%s.svc:2379" (include "kmilvus.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- required "externalEtcd.endpoint is required when etcd.enabled=false" .Values.externalEtcd.endpoint -}}
{{- end -}}
{{- end -}}

{{/* host:port of NATS (without scheme or credentials). */}}
{{- define "kmilvus.natsHostPort" -}}
{{- if .Values.nats.enabled -}}
{{- printf "%s-nats.%s.svc:4222" (include "kmilvus.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- $url := required "externalNats.url is required when nats.enabled=false" .Values.externalNats.url -}}
{{- $url | trimPrefix "nats://" -}}
{{- end -}}
{{- end -}}

{{- define "kmilvus.natsUrl" -}}
{{- printf "nats://%s" (include "kmilvus.natsHostPort" .) -}}
{{- end -}}

{{- define "kmilvus.natsAuth" -}}
{{- if and (not .Values.nats.enabled) .Values.externalNats.auth.existingSecret -}}true{{- end -}}
{{- end -}}

{{- define "kmilvus.minioSecretName" -}}
{{- default (printf "%s-minio" (include "kmilvus.fullname" .)) .Values.minio.auth.existingSecret -}}
{{- end -}}

{{- define "kmilvus.storageUri" -}}
{{- if .Values.minio.enabled -}}
{{- printf "s3://%s/%s?endpoint=http://%s-minio.%s.svc:9000" .Values.minio.bucket .Values.minio.prefix (include "kmilvus.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- required "storage.uri is required when minio.enabled=false" .Values.storage.uri -}}
{{- end -}}
{{- end -}}

{{/* Secret name, access-key key and secret-key key for S3, or nothing. */}}
{{- define "kmilvus.s3SecretName" -}}
{{- if .Values.minio.enabled -}}
{{- include "kmilvus.minioSecretName" . -}}
{{- else -}}
{{- .Values.storage.existingSecret -}}
{{- end -}}
{{- end -}}

{{- define "kmilvus.s3AccessKeyIdKey" -}}
{{- if .Values.minio.enabled -}}rootUser{{- else -}}{{ .Values.storage.accessKeyIdKey }}{{- end -}}
{{- end -}}

{{- define "kmilvus.s3SecretAccessKeyKey" -}}
{{- if .Values.minio.enabled -}}rootPassword{{- else -}}{{ .Values.storage.secretAccessKeyKey }}{{- end -}}
{{- end -}}

{{/* Environment shared by every kmilvus container; takes the root context. */}}
{{- define "kmilvus.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
# The address other components use to reach this one (published in its etcd session).
- name: KMILVUS_INTERNAL_HOST
  value: $(POD_IP)
{{- if .Values.security.auth.enabled }}
- name: KMILVUS_AUTH
  value: "true"
{{- end }}
{{- if .Values.security.internalTls.secretName }}
- name: KMILVUS_INTERNAL_TLS_CERT
  value: /etc/kmilvus/internal-tls/tls.crt
- name: KMILVUS_INTERNAL_TLS_KEY
  value: /etc/kmilvus/internal-tls/tls.key
- name: KMILVUS_INTERNAL_TLS_CA
  value: /etc/kmilvus/internal-tls/ca.crt
- name: KMILVUS_INTERNAL_TLS_SERVER_NAME
  value: {{ .Values.security.internalTls.serverName | quote }}
{{- end }}
{{- if .Values.security.etcd.tlsSecret }}
- name: KMILVUS_ETCD_TLS_CERT
  value: /etc/kmilvus/etcd-tls/tls.crt
- name: KMILVUS_ETCD_TLS_KEY
  value: /etc/kmilvus/etcd-tls/tls.key
- name: KMILVUS_ETCD_TLS_CA
  value: /etc/kmilvus/etcd-tls/ca.crt
{{- end }}
{{- if .Values.security.nats.tlsSecret }}
- name: KMILVUS_NATS_TLS_CERT
  value: /etc/kmilvus/nats-tls/tls.crt
- name: KMILVUS_NATS_TLS_KEY
  value: /etc/kmilvus/nats-tls/tls.key
- name: KMILVUS_NATS_TLS_CA
  value: /etc/kmilvus/nats-tls/ca.crt
{{- end }}
{{- with .Values.security.etcd.authSecret }}
- name: KMILVUS_ETCD_USER
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.security.etcd.usernameKey }}
- name: KMILVUS_ETCD_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.security.etcd.passwordKey }}
{{- end }}
{{- if include "kmilvus.natsAuth" . }}
- name: NATS_USER
  valueFrom:
    secretKeyRef:
      name: {{ .Values.externalNats.auth.existingSecret }}
      key: {{ .Values.externalNats.auth.usernameKey }}
- name: NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.externalNats.auth.existingSecret }}
      key: {{ .Values.externalNats.auth.passwordKey }}
- name: KMILVUS_NATS_URL
  value: {{ printf "nats://$(NATS_USER):$(NATS_PASSWORD)@%s" (include "kmilvus.natsHostPort" .) | quote }}
{{- end }}
{{- $s3 := include "kmilvus.s3SecretName" . }}
{{- if $s3 }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $s3 }}
      key: {{ include "kmilvus.s3AccessKeyIdKey" . }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $s3 }}
      key: {{ include "kmilvus.s3SecretAccessKeyKey" . }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "kmilvus.envFrom" -}}
- configMapRef:
    name: {{ include "kmilvus.fullname" . }}-config
{{- with .Values.extraEnvFrom }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Pod annotations shared by kmilvus pods: config checksum (+ Prometheus hints). */}}
{{- define "kmilvus.podAnnotations" -}}
checksum/config: {{ include (print .ctx.Template.BasePath "/configmap.yaml") .ctx | sha256sum }}
{{- if .ctx.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{- define "kmilvus.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- range $name, $secret := include "kmilvus.securitySecrets" . | fromYaml }}
- name: {{ $name }}
  secret:
    secretName: {{ $secret }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/* The TLS Secrets every kmilvus pod mounts (volume name: Secret), as YAML. */}}
{{- define "kmilvus.securitySecrets" -}}
{{- with .Values.security.internalTls.secretName }}
internal-tls: {{ . }}
{{- end }}
{{- with .Values.security.etcd.tlsSecret }}
etcd-tls: {{ . }}
{{- end }}
{{- with .Values.security.nats.tlsSecret }}
nats-tls: {{ . }}
{{- end }}
{{- end -}}

{{/* Mounts of those Secrets, read-only, under /etc/kmilvus/<name>. */}}
{{- define "kmilvus.securityMounts" -}}
{{- range $name, $secret := include "kmilvus.securitySecrets" . | fromYaml }}
- name: {{ $name }}
  mountPath: /etc/kmilvus/{{ $name }}
  readOnly: true
{{- end }}
{{- end -}}


{{/* TLS of the Milvus API: the Secret (tls.crt, tls.key, ca.crt) is mounted here. */}}
{{- define "kmilvus.tlsDir" -}}/etc/kmilvus/tls{{- end -}}
