#!/usr/bin/env bash
# Makes sure Debian's headless-capable Chromium is at /usr/bin/chromium for
# the River UI browser test (e2e TestRiverUIInBrowser). Installs the
# `chromium` package with apt-get, as root or through sudo, where it is
# missing. It never fails the build: when Chromium cannot be installed it
# says so, and the browser test skips with a message of its own.
set -uo pipefail

if [ -x /usr/bin/chromium ]; then
  exit 0
fi

if [ "$(id -u)" = 0 ]; then
  as_root() { "$@"; }
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root() { sudo -n "$@"; }
else
  echo "chromium.sh: /usr/bin/chromium is missing and this user can neither install packages nor sudo; the browser test will be skipped" >&2
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium.sh: /usr/bin/chromium is missing and there is no apt-get here; the browser test will be skipped" >&2
  exit 0
fi

echo "chromium.sh: installing Debian's chromium package" >&2
if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq ||
   ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; then
  echo "chromium.sh: could not install chromium; the browser test will be skipped" >&2
  exit 0
fi
if [ ! -x /usr/bin/chromium ]; then
  echo "chromium.sh: the chromium package installed no /usr/bin/chromium; the browser test will be skipped" >&2
fi
exit 0
