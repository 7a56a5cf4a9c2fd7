#!/usr/bin/env bash
# Installs the identity providers of the OpenID Connect tests and of
# `scripts/demo --with-idp`: node's oidc-provider and jose from npm (pinned by
# package-lock.json).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v node >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq nodejs npm >/dev/null
fi
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
echo "identity provider deps ok: node $(node --version)"
