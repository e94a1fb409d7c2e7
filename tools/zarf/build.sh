#!/usr/bin/env bash
# `make zarf-bin`: build the zarf CLI from its Go module (github.com/zarf-dev/zarf at ZARF_VERSION; the tools
# module tools/zarf/go.mod carries upstream's replace directives, which `go install mod@ver` would refuse)
# into ~/.cache/uds-vm-operator/zarf-<version>/bin and print its path. A warm run only compares a stamp.
# The version is stamped in like upstream's release build (config.CLIVersion names the init package
# zarf-init-<arch>-<version>.tar.zst), and so is the Kubernetes minor the module links, which Helm inside
# zarf uses as the cluster version while it templates charts at `package create` (the chart's kubeVersion).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
k8s="$(awk '$1 == "k8s.io/client-go" {print $2}' "$here/go.mod")"   # v0.MINOR.PATCH
minor="$(echo "$k8s" | cut -d. -f2)" patch="$(echo "$k8s" | cut -d. -f3)"
[ -n "$minor" ] || { echo "error: tools/zarf/go.mod does not require k8s.io/client-go" >&2; exit 1; }
ldflags="-X github.com/zarf-dev/zarf/src/config.CLIVersion=${ZARF_VERSION}"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=${minor}"
done
ldflags+=" -X k8s.io/component-base/version.gitVersion=v1.${minor}.${patch}"
exec "$root/tools/provenance/build-go-tool.sh" zarf github.com/zarf-dev/zarf github.com/zarf-dev/zarf \
  "$ZARF_VERSION" "$ldflags"
