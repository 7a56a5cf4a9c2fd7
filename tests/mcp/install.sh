#!/usr/bin/env bash
# Installs the MCP clients the bridge is tested with: the official Python SDK
# (`mcp` on PyPI) and the official TypeScript SDK (`@modelcontextprotocol/sdk`
# on npm). Idempotent; fails loudly.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
(cd "$here" && npm ci --silent --no-audit --no-fund)
python3 -c 'import importlib.metadata as m; print("mcp python sdk", m.version("mcp"))'
