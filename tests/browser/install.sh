#!/usr/bin/env bash
# Installs what the browser test needs: Debian's chromium (headless) and
# playwright-core from npm (no browser download: it drives /usr/bin/chromium).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v chromium >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
fi
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
echo "browser test deps ok: $(chromium --version)"
