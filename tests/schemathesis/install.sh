#!/usr/bin/env bash
# Installs schemathesis, which scripts/schemathesis runs against a real CS and
# its OpenAPI description (GET /api/v1/openapi.json). Idempotent: pip leaves
# an already-satisfied pin alone. Fails loudly on any error.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
python3 - <<'PY'
import importlib.metadata as m
print("schemathesis deps ok: schemathesis", m.version("schemathesis"), "hypothesis", m.version("hypothesis"))
PY
