#!/usr/bin/env bash
# Installs Debian's headless-capable Chromium for the report.html browser test
# (tests/test_report_html.py), once: a no-op when `chromium` is already on PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
    echo "browser.sh: chromium is missing and this user cannot install it (not root, no sudo)" >&2
    exit 1
fi
SUDO=$([ "$(id -u)" -eq 0 ] && echo "" || echo sudo)
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium
