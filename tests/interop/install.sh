#!/usr/bin/env bash
# Install the Python dependencies of the CHEQ interop tooling (joserfc + cryptography).
# Idempotent: pip leaves already-satisfied pins alone. Fails loudly on any error.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
python3 - <<'PY'
import importlib.metadata as m
print("interop deps ok: joserfc", m.version("joserfc"), "cryptography", m.version("cryptography"))
PY
