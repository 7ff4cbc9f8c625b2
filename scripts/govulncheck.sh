#!/usr/bin/env bash
# Runs govulncheck over the module (or over the package patterns given as
# arguments; flags such as `-show verbose` may come first).
#
# The public vulnerability database, vuln.go.dev, is used when it answers.
# Where it does not (an offline or firewalled machine), the script builds a
# local copy in the v1 layout that `govulncheck -db file://...` reads
# (index/db.json, index/modules.json, ID/<id>.json) from the OSV files of the
# golang.org/x/vulndb module, fetched through the Go module proxy, with that
# module's own indexdb command. The copy is only as fresh as the newest
# golang.org/x/vulndb version on the proxy: its date is printed.
#
# The exit status is govulncheck's: 0 when clean, 3 when the code calls a
# vulnerable symbol. When neither database can be had, it says so and exits 0.
#
# Environment: VULNDB_VERSION (default latest) picks the golang.org/x/vulndb
# version; VULNDB_DIR (default ~/.cache/leadintake/vulndb) holds the copies
# and the govulncheck binary;
# VULNDB=remote|local forces one database.
set -euo pipefail
cd "$(dirname "$0")/.."
# The toolchain of the Makefile, also when this script is run on its own.
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

GOVULNCHECK=golang.org/x/vuln/cmd/govulncheck@v1.9.0
VULNDB_MODULE=golang.org/x/vulndb
cache_root="${VULNDB_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/leadintake/vulndb}"

args=("$@")
has_pattern=false
for a in "${args[@]}"; do
  case "$a" in -*) ;; *) has_pattern=true ;; esac
done
$has_pattern || args+=(./...)

say() { echo "govulncheck.sh: $*" >&2; }

give_up() {
  say "$*"
  say "govulncheck was NOT run: no vulnerability database could be reached or built."
  say "Run it where https://vuln.go.dev or the Go module proxy answers."
  exit 0
}

remote_answers() {
  if command -v curl >/dev/null 2>&1; then
    curl -fsS --max-time 10 -o /dev/null https://vuln.go.dev/index/db.json 2>/dev/null
  else
    timeout 10 bash -c 'exec 3<>/dev/tcp/vuln.go.dev/443' 2>/dev/null
  fi
}

# Installed rather than run with `go run`, which would turn govulncheck's
# exit status 3 (vulnerabilities found) into 1.
bin="$cache_root/bin"
mkdir -p "$bin"
GOBIN="$bin" go install "$GOVULNCHECK" || give_up "cannot install $GOVULNCHECK"

if [ "${VULNDB:-}" != local ] && remote_answers; then
  say "database: https://vuln.go.dev"
  exec "$bin/govulncheck" "${args[@]}"
fi
[ "${VULNDB:-}" = remote ] && give_up "https://vuln.go.dev does not answer"
say "https://vuln.go.dev does not answer: building a local database from $VULNDB_MODULE"

# Outside the module, so that its go.mod is neither read nor changed.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

read -r version published < <(cd "$work" && go list -m -f '{{.Version}} {{.Time}}' "$VULNDB_MODULE@${VULNDB_VERSION:-latest}" 2>"$work/err") ||
  give_up "cannot resolve $VULNDB_MODULE@${VULNDB_VERSION:-latest}: $(tail -n 3 "$work/err")"
db="$cache_root/$version"

if [ ! -f "$db/index/db.json" ]; then
  src=$(cd "$work" && go mod download -json "$VULNDB_MODULE@$version" 2>"$work/err" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p') ||
    give_up "cannot download $VULNDB_MODULE@$version: $(tail -n 3 "$work/err")"
  [ -n "$src" ] && [ -d "$src/data/osv" ] ||
    give_up "$VULNDB_MODULE@$version holds no data/osv directory of OSV files"
  say "indexing $(find "$src/data/osv" -name '*.json' | wc -l) OSV entries of $VULNDB_MODULE@$version"
  mkdir -p "$cache_root"
  tmp=$(mktemp -d "$cache_root/.build.XXXXXX")
  if ! (cd "$work" && go run "$VULNDB_MODULE/cmd/indexdb@$version" -vulns "$src/data/osv" -out "$tmp/db") >"$work/err" 2>&1; then
    rm -rf "$tmp"
    give_up "cannot index $VULNDB_MODULE@$version: $(tail -n 5 "$work/err")"
  fi
  rm -rf "$db"
  mv "$tmp/db" "$db"
  rmdir "$tmp"
fi

# The OSV files of the module carry no modification times: the version's
# commit time says how fresh the copy is.
say "database: file://$db ($VULNDB_MODULE@$version, committed $published)"
rm -rf "$work"
trap - EXIT
exec "$bin/govulncheck" -db "file://$db" "${args[@]}"
