{{/* The labels every object carries: deploy/'s app.kubernetes.io/name, and Helm's own (no app.kubernetes.io/instance: the webhook configuration's is the mesh name, as OSM's). */}}
{{- define "trellis.labels" -}}
app.kubernetes.io/name: trellis
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The image of every Trellis container: repository:tag. */}}
{{- define "trellis.image" -}}
{{ printf "%s:%s" .Values.image.repository (toString .Values.image.tag) }}
{{- end -}}

{{/* The pod and container security settings deploy/ gives the controller and the injector. */}}
{{- define "trellis.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- define "trellis.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}
