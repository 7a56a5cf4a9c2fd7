#!/usr/bin/env bash
# Installs node's jose (pinned by package-lock.json) for the JOSE interop
# tests (tests/jose_interop.rs). Idempotent.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v node >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq nodejs npm >/dev/null
fi
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
echo "jose interop deps ok: node $(node --version), jose $(node -p "require('$here/node_modules/jose/package.json').version")"
