#!/usr/bin/env bash
# Installs what the voice tests need: Debian's espeak-ng, a real speech
# synthesiser that reads SSML (-m), used to render the voice view to audio.
set -euo pipefail
if ! command -v espeak-ng >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq espeak-ng >/dev/null
fi
echo "voice test deps ok: $(espeak-ng --version)"
