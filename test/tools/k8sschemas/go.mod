// k8sschemas writes the Kubernetes JSON schemas kubeconform validates against, offline, from the
// OpenAPI spec in the k8s.io/kubernetes module, and the Prometheus Operator's ServiceMonitor from
// its CRD (both fetched through the Go module proxy). A module of its own so the project's go.mod
// stays lean; `make kubeconform-tool` runs it.
module github.com/lush-agents/lush/test/tools/k8sschemas

go 1.26.8

require gopkg.in/yaml.v3 v3.0.1
