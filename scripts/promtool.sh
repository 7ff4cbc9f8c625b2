#!/usr/bin/env bash
# Makes sure `promtool` is on PATH for the alerting rules' tests (deploy
# TestAlertRules: `promtool check rules` and `promtool test rules`). Installs
# Debian's `prometheus` package, which brings promtool and the Prometheus
# server, with apt-get as root or through sudo where promtool is missing. The
# package's own Prometheus service is not started (nor enabled): only its
# binaries are wanted.
#
# Outside CI it never fails the build: when promtool cannot be installed it
# says so, and the test skips with a message of its own. In CI (CI=true) a
# missing promtool fails, so that the rules are never shipped unchecked.
set -uo pipefail

if command -v promtool >/dev/null 2>&1; then
  exit 0
fi

give_up() {
  if [ "${CI:-}" = true ]; then
    echo "promtool.sh: $1; CI needs promtool to check the alerting rules" >&2
    exit 1
  fi
  echo "promtool.sh: $1; the alerting rules' tests will be skipped" >&2
  exit 0
}

if [ "$(id -u)" = 0 ]; then
  as_root() { "$@"; }
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root() { sudo -n "$@"; }
else
  give_up "promtool is missing and this user can neither install packages nor sudo"
fi

if ! command -v apt-get >/dev/null 2>&1; then
  give_up "promtool is missing and there is no apt-get here"
fi

# Keep the package's service from starting while it is installed (its
# default port, 9090, is the fake downstream's in `make run`): a
# policy-rc.d that refuses every start, only for the install, and only where
# the machine has none of its own.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  trap 'as_root rm -f "$policy"' EXIT
  printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
  as_root chmod 755 "$policy"
fi

echo "promtool.sh: installing Debian's prometheus package (for promtool)" >&2
if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq ||
   ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; then
  give_up "could not install the prometheus package"
fi
if [ -d /run/systemd/system ]; then
  as_root systemctl disable --quiet prometheus.service 2>/dev/null || true
fi
if ! command -v promtool >/dev/null 2>&1; then
  give_up "the prometheus package installed no promtool"
fi
exit 0
