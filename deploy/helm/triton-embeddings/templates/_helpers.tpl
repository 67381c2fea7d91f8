{{/* The release's name prefix for every object, at most 63 characters less the
longest suffix added to it ("-triton-headless", 16), so that every name is a
valid DNS label. */}}
{{- define "triton-embeddings.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 47 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 47 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "triton-embeddings.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The labels that select one component's pods: (dict "context" $ "component" NAME). */}}
{{- define "triton-embeddings.selectorLabels" -}}
app.kubernetes.io/name: {{ .context.Chart.Name }}
app.kubernetes.io/instance: {{ .context.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* An object's labels: the common ones plus its component's selector. */}}
{{- define "triton-embeddings.componentLabels" -}}
{{ include "triton-embeddings.labels" .context }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The name of the Secret that holds the admin key. */}}
{{- define "triton-embeddings.adminKeySecret" -}}
{{- .Values.adminKey.existingSecret | default (printf "%s-admin-key" (include "triton-embeddings.fullname" .)) -}}
{{- end -}}

{{/* The headless Service of the Triton pods, as the balancer resolves it. */}}
{{- define "triton-embeddings.tritonHeadless" -}}
{{- printf "%s-triton-headless.%s.svc.%s" (include "triton-embeddings.fullname" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/* With tenants, the port of the edge's per-tenant stats: the launcher puts
them on the metrics port + 1 (server/launch.py, EDGE_STATS_PORT_OFFSET). */}}
{{- define "triton-embeddings.edgeStatsPort" -}}
{{- add .Values.triton.ports.metrics 1 -}}
{{- end -}}

{{/* Traces (values.yaml, tracing): the variables that give the launcher's
and the gateway's --otlp-endpoint and --trace-sampling their defaults, as
docker-compose.yml sets them, one env entry a line; none where the value is
empty or null (`kindIs`: a sampling of 0 is falsy in a template). */}}
{{- define "triton-embeddings.tracingEnv" -}}
{{- with .Values.tracing.otlpEndpoint }}
- name: EMBEDDING_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- if not (kindIs "invalid" .Values.tracing.sampling) }}
- name: EMBEDDING_TRACE_SAMPLING
  value: {{ .Values.tracing.sampling | toString | quote }}
{{- end }}
{{- end -}}

{{/* A model by its Hub id (values.yaml, model): where the Hugging Face cache
and the exports are mounted, and so what HF_HOME and EMBEDDING_EXPORTS say, in
the initContainer that writes them and in the server that reads them alike. */}}
{{- define "triton-embeddings.hfHome" -}}
/cache/huggingface
{{- end -}}

{{- define "triton-embeddings.exportsDir" -}}
/cache/exports
{{- end -}}

{{/* The claim of the Hugging Face cache: hfCache.existingClaim, or the one
the chart makes. */}}
{{- define "triton-embeddings.hfCacheClaim" -}}
{{- .Values.hfCache.existingClaim | default (printf "%s-hf-cache" (include "triton-embeddings.fullname" .)) -}}
{{- end -}}

{{/* The variables that name the model and its folders to the launcher and
to huggingface_hub, in the initContainer and the server alike, one env entry
a line; no revision where it is empty (the launcher's default, main). */}}
{{- define "triton-embeddings.modelEnv" -}}
- name: EMBEDDING_MODEL_ID
  value: {{ .Values.model.id | quote }}
{{- with .Values.model.revision }}
- name: EMBEDDING_MODEL_REVISION
  value: {{ . | quote }}
{{- end }}
- name: HF_HOME
  value: {{ include "triton-embeddings.hfHome" . }}
- name: EMBEDDING_EXPORTS
  value: {{ include "triton-embeddings.exportsDir" . }}
{{- end -}}
