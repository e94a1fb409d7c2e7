#!/usr/bin/env bash
# Print the Debian archive this machine's apt already uses (first deb URI of /etc/apt/sources.list.d/debian.sources
# or /etc/apt/sources.list), so image builds use the site's own mirror and the project names no host.
# DEBIAN_ARCHIVE in the environment overrides it.
set -euo pipefail
if [ -n "${DEBIAN_ARCHIVE:-}" ]; then echo "$DEBIAN_ARCHIVE"; exit 0; fi
uri="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
  uri="$(awk '$1 == "deb" && $2 ~ /^http/ {print $2; exit}' /etc/apt/sources.list)"
fi
[ -n "$uri" ] || { echo "error: no Debian archive in /etc/apt/sources.list*; set DEBIAN_ARCHIVE" >&2; exit 1; }
echo "$uri"
