#!/usr/bin/env bash
# Install checkov (IaC static analysis, issue 32) at CHECKOV_VERSION into its own venv in
# ~/.cache/uds-vm-operator/checkov-<version>/, never into the operator's dependencies: a test tool, like cosign.
# Its dependencies are pinned by tools/scan/checkov-constraints.txt. Prints the checkov executable's path on
# stdout; a warm run only compares a stamp (version, constraints hash) and exits.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
dir="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/checkov-${CHECKOV_VERSION}"
stamp="$dir/.stamp"
want="checkov=${CHECKOV_VERSION} $(sha256sum < "$here/checkov-constraints.txt" | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$dir/venv/bin/checkov" ]; then
  echo "$dir/venv/bin/checkov"
  exit 0
fi
command -v python3 >/dev/null || { echo "error: python3 (>= 3.9) is required to install checkov" >&2; exit 1; }
start=$(date +%s)
echo "installing checkov ${CHECKOV_VERSION} into $dir/venv" >&2
rm -rf "$dir/venv" "$stamp"
mkdir -p "$dir"
python3 -m venv "$dir/venv"
"$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  --constraint "$here/checkov-constraints.txt" "checkov==${CHECKOV_VERSION}" >&2
"$dir/venv/bin/checkov" --version >/dev/null
echo "$want" > "$stamp"
echo "installed checkov in $(( $(date +%s) - start )) s" >&2
echo "$dir/venv/bin/checkov"
