#!/usr/bin/env bash
# Installs aics-tlog, the independent tlog-tiles / signed-note verifier the
# transparency log tests check cheq's log with. Idempotent; fails loudly.
# aics-tlog declares Python >= 3.12; it runs on 3.11 (its modules compile
# and its own checks pass here), so the declaration alone is waived.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check \
  --ignore-requires-python -r "$here/requirements.txt"
python3 -c 'import importlib.metadata as m; print("aics-tlog", m.version("aics-tlog"))'
