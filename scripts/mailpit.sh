#!/usr/bin/env bash
# Makes sure the pinned Mailpit (a real SMTP server with an HTTP API) is at
# ./bin/mailpit for the e-mail destination's tests (destination/email,
# through internal/mailpittest). Installs it with `go install` from the Go
# module proxy where it is missing or another version: a Go program, so no
# package manager or root is needed, only the Go toolchain the Makefile
# exports. The first install downloads and builds its modules (minutes);
# later runs find it in place.
#
# Outside CI it never fails the build: when Mailpit cannot be installed it
# says so, and the tests skip with a message of their own. In CI (CI=true)
# a missing Mailpit fails, so that the e-mail kind is never shipped
# untested.
set -uo pipefail
cd "$(dirname "$0")/.."

version=v1.33.1
bin="$PWD/bin/mailpit"
go="${GO:-go}"

if [ -x "$bin" ] && "$go" version -m "$bin" 2>/dev/null | grep -q "github.com/axllent/mailpit[[:space:]]*$version"; then
  exit 0
fi

give_up() {
  if [ "${CI:-}" = true ]; then
    echo "mailpit.sh: $1; CI needs Mailpit to test the e-mail destination" >&2
    exit 1
  fi
  echo "mailpit.sh: $1; the e-mail destination's tests will be skipped" >&2
  exit 0
}

if ! command -v "$go" >/dev/null 2>&1; then
  give_up "there is no go command to install Mailpit with"
fi

echo "mailpit.sh: installing Mailpit $version into ./bin (go install; the first time takes a few minutes)" >&2
if ! GOBIN="$PWD/bin" "$go" install "github.com/axllent/mailpit@$version"; then
  give_up "could not install github.com/axllent/mailpit@$version"
fi
if [ ! -x "$bin" ]; then
  give_up "go install put no mailpit at $bin"
fi
exit 0
