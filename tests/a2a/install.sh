#!/usr/bin/env bash
# Installs the A2A client the bridge is tested with: the official Python SDK
# (`a2a-sdk` on PyPI). Idempotent; fails loudly.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
python3 -c 'import importlib.metadata as m; print("a2a python sdk", m.version("a2a-sdk"))'
