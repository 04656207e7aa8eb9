#!/usr/bin/env bash
# Validates the chart with real tools and no cluster (README, Kubernetes): helm lint, helm
# template with the defaults and with the Prometheus Operator's objects, and both renderings
# validated strictly (unknown fields are errors) by kubeconform against the schemas of
# Kubernetes $K8S_VERSION (from the k8s.io/kubernetes module's api/openapi-spec) and of the
# Operator's CRDs (prometheus-operator $OPERATOR_VERSION), offline. Helm and kubeconform are
# built once with `go install` from the Go module proxy; everything is cached under ~/.cache.
set -euo pipefail
cd "$(dirname "$0")"

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
KUBECONFORM_VERSION="${KUBECONFORM_VERSION:-v0.8.0}"
K8S_VERSION="${K8S_VERSION:-1.34.2}"
OPERATOR_VERSION="${OPERATOR_VERSION:-v0.85.0}"
CACHE="${STREAMEVAL_CACHE:-$HOME/.cache/streameval}"
export GOPATH="$HOME/.cache/go" GOMODCACHE="$HOME/.cache/go-mod" GOFLAGS=-mod=mod
TOOLS="$CACHE/tools/helm-$HELM_VERSION-kubeconform-$KUBECONFORM_VERSION"
mkdir -p "$TOOLS"

if [[ ! -x "$TOOLS/helm" || ! -x "$TOOLS/kubeconform" ]]; then
  command -v go >/dev/null || { echo "check.sh: needs Go (https://go.dev) to build helm and kubeconform" >&2; exit 1; }
  echo "== building helm $HELM_VERSION and kubeconform $KUBECONFORM_VERSION (once; cached in $TOOLS)"
  GOBIN="$TOOLS" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  GOBIN="$TOOLS" go install "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
fi
HELM="$TOOLS/helm"
KUBECONFORM="$TOOLS/kubeconform"

SCHEMAS="$CACHE/k8s-schemas/v$K8S_VERSION-operator-$OPERATOR_VERSION-strict"
if [[ ! -f "$SCHEMAS/statefulset-apps-v1.json" ]]; then
  echo "== strict schemas of Kubernetes $K8S_VERSION and prometheus-operator $OPERATOR_VERSION (once; cached)"
  k8s_dir=$(cd /tmp && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  op_dir=$(cd /tmp && go mod download -json "github.com/prometheus-operator/prometheus-operator@$OPERATOR_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  python3 k8s_schemas.py "$k8s_dir/api/openapi-spec/swagger.json" "$op_dir/example/prometheus-operator-crd" "$SCHEMAS.tmp"
  rm -rf "$SCHEMAS" && mv "$SCHEMAS.tmp" "$SCHEMAS"
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
values=(--set serviceMonitor.enabled=true --set prometheusRule.enabled=true)
operator=(--api-versions monitoring.coreos.com/v1 "${values[@]}")

echo "== helm lint"
"$HELM" lint --strict streameval
"$HELM" lint --strict streameval "${values[@]}"

echo "== helm template: defaults, and with the Operator's objects"
"$HELM" template streameval streameval --kube-version "$K8S_VERSION" > "$out/default.yaml"
"$HELM" template streameval streameval --kube-version "$K8S_VERSION" "${operator[@]}" > "$out/operator.yaml"
"$HELM" template streameval streameval --kube-version "$K8S_VERSION" --api-versions monitoring.coreos.com/v1 --set podMonitor.enabled=true > "$out/podmonitor.yaml"

echo "== kubeconform -strict against Kubernetes $K8S_VERSION and the Operator's CRDs"
"$KUBECONFORM" -strict -summary -kubernetes-version "$K8S_VERSION" \
  -schema-location "$SCHEMAS/{{.ResourceKind}}{{.KindSuffix}}.json" \
  -schema-location "$SCHEMAS/{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json" \
  "$out/default.yaml" "$out/operator.yaml" "$out/podmonitor.yaml"

if [[ -n "${RENDER_DIR:-}" ]]; then cp "$out"/*.yaml "$RENDER_DIR"/; fi
echo "chart OK"
