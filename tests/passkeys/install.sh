#!/usr/bin/env bash
# Installs the independent WebAuthn verifier the passkey tests check the
# evidence with (py_webauthn). Idempotent; fails loudly.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
python3 -c 'import importlib.metadata as m; print("py_webauthn", m.version("webauthn"))'
