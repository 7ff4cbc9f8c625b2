#!/usr/bin/env bash
# Runs a command against a PostgreSQL server, and never touches the
# machine's own PostgreSQL configuration.
#
# Usage: scripts/postgres.sh [-v VAR]... [-d DATABASE] [--] COMMAND [ARG...]
#
# The first of the variables VAR (default TEST_DATABASE_URL) that is set
# names the server to use: it must answer, and be PostgreSQL 14 or later.
# When none is set, the checkout's private server is used: a data folder of
# its own (.pg/ at the root of the checkout, git-ignored), made with initdb,
# listening on 127.0.0.1 on a free port (not 5432) and on a unix socket in
# .pg/, started when no command of this checkout is using it yet and stopped
# when the last one ends (also when it fails, or on Ctrl-C). The first VAR
# is then exported for COMMAND as the private server's URL naming DATABASE
# (default postgres), LEADINTAKE_PRIVATE_PG as its data folder, and that
# server's programs come first on its PATH.
# Several checkouts' servers run side by side; commands of one checkout
# share its server.
#
# The server programs (initdb, pg_ctl, postgres) are the newest of
# /usr/lib/postgresql/N/bin, else those beside pg_ctl on the PATH, else (on
# Debian and Ubuntu) the distribution's server package, downloaded with
# apt-get and unpacked into .pg/pkg when the shared libraries it needs are
# present, or installed with apt-get (as root or through sudo) without
# creating or starting a cluster of the system's. Each of these is said on
# stderr. POSTGRES_BIN names a bin directory to use instead (POSTGRES_BIN=
# download fetches the package even where a server is installed).
#
# As root, the private server runs as the postgres user (PostgreSQL refuses
# root), which must be able to reach the checkout.
set -euo pipefail

say() { echo "postgres.sh: $*" >&2; }
die() { say "$*"; exit 1; }

vars=() database=postgres
while [ $# -gt 0 ]; do
  case "$1" in
    -v) vars+=("$2"); shift 2 ;;
    -d) database=$2; shift 2 ;;
    --) shift; break ;;
    -*) die "unknown flag $1 (usage: scripts/postgres.sh [-v VAR]... [-d DATABASE] [--] COMMAND [ARG...])" ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || die "no command (usage: scripts/postgres.sh [-v VAR]... [-d DATABASE] [--] COMMAND [ARG...])"
[ ${#vars[@]} -gt 0 ] || vars=(TEST_DATABASE_URL)

min_version=14

# too_old VERSION_NUM WHAT: one line, and exit, below PostgreSQL 14.
too_old() {
  [ "$1" -ge $((min_version * 10000)) ] ||
    die "$2 is PostgreSQL $(($1 / 10000)); leadintake needs PostgreSQL $min_version or later"
}

# A server named by the caller: it must answer; nothing here starts it.
for var in "${vars[@]}"; do
  url="${!var:-}"
  [ -n "$url" ] || continue
  answers=false
  if command -v pg_isready >/dev/null 2>&1; then
    pg_isready -q -d "$url" -t 5 && answers=true
  else
    hostport=$(sed -E 's#^[a-z]+://([^@/]*@)?([^/?,]*).*#\2#' <<<"$url")
    host=${hostport%:*}; port=${hostport##*:}
    [ "$host" != "$hostport" ] || port=5432
    (exec 3<>"/dev/tcp/${host:-127.0.0.1}/$port") 2>/dev/null && answers=true
  fi
  $answers || die "nothing answers at $var's server; start that server first, or unset $var to use a private one"
  if command -v psql >/dev/null 2>&1; then
    num=$(psql "$url" -Atqc 'SHOW server_version_num' 2>/dev/null) && too_old "$num" "$var's server"
  fi
  exec "$@"
done

# The private server of this checkout.
root=$(cd "$(dirname "$0")/.." && pwd)
pgdir="$root/.pg"
data="$pgdir/data"
mkdir -p "$pgdir"

if [ "$(id -u)" = 0 ]; then
  if ! id -u postgres >/dev/null 2>&1; then
    say "running as root, and PostgreSQL refuses root: creating the system user postgres to run it as"
    useradd --system --user-group --no-create-home --home-dir /var/lib/postgresql --shell /usr/sbin/nologin postgres
  fi
  chown postgres: "$pgdir"
  runuser -u postgres -- test -x "$pgdir" ||
    die "the postgres user cannot reach $pgdir (PostgreSQL runs as postgres when this runs as root): make the folders above it searchable (chmod o+x), or set ${vars[0]}"
  as_pg() { (cd "$pgdir" && runuser -u postgres -- "$@"); }
else
  as_pg() { (cd "$pgdir" && "$@"); }
fi
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "installing PostgreSQL needs root, and there is no sudo: install PostgreSQL $min_version or later (initdb, pg_ctl) and put pg_ctl on the PATH"
  fi
}

major_of() { # a bin directory: its server's major version
  "$1/postgres" --version | sed -nE 's/^postgres \(PostgreSQL\) ([0-9]+).*/\1/p'
}

# find_bin [MAJOR]: the server programs, of that major version when given.
find_bin() {
  local want=${1:-} dirs=() d
  if [ -n "${POSTGRES_BIN:-}" ] && [ "$POSTGRES_BIN" != download ]; then
    dirs=("$POSTGRES_BIN")
  elif [ "${POSTGRES_BIN:-}" = download ]; then
    dirs=($(ls -d "$pgdir"/pkg/usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r))
  else
    dirs=($(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r))
    if d=$(command -v pg_ctl 2>/dev/null); then
      dirs+=("$(dirname "$(readlink -f "$d")")")
    fi
    dirs+=($(ls -d "$pgdir"/pkg/usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r))
  fi
  for d in "${dirs[@]}"; do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ] || continue
    [ -z "$want" ] || [ "$(major_of "$d")" = "$want" ] || continue
    echo "$d"
    return 0
  done
  return 1
}

# The distribution's newest server package, unpacked into .pg/pkg where its
# shared libraries are present, else installed without a cluster.
install_bin() {
  command -v apt-get >/dev/null 2>&1 ||
    die "no PostgreSQL server programs (initdb, pg_ctl, postgres) and no apt-get: install PostgreSQL $min_version or later and put pg_ctl on the PATH, or set ${vars[0]}"
  local pkg
  pkg=$(apt-cache search --names-only '^postgresql-[0-9]+$' 2>/dev/null | cut -d' ' -f1 | sort -V | tail -n 1)
  if [ -z "$pkg" ]; then
    say "no postgresql-N package known to apt: running apt-get update"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    pkg=$(apt-cache search --names-only '^postgresql-[0-9]+$' | cut -d' ' -f1 | sort -V | tail -n 1)
  fi
  [ -n "$pkg" ] || die "the distribution has no postgresql-N package: install PostgreSQL $min_version or later"
  too_old "$((${pkg#postgresql-} * 10000))" "the distribution's $pkg"
  local major=${pkg#postgresql-} dl="$pgdir/pkg.download"
  local why="no PostgreSQL server programs here"
  [ "${POSTGRES_BIN:-}" != download ] || why="POSTGRES_BIN=download"
  say "$why: downloading the distribution's $pkg, postgresql-client-$major and libpq5 into $pgdir/pkg (nothing is installed on the system)"
  rm -rf "$dl" && mkdir -p "$dl"
  if (cd "$dl" && apt-get download -qq "$pkg" "postgresql-client-$major" libpq5 >/dev/null 2>&1); then
    rm -rf "$pgdir/pkg"
    for deb in "$dl"/*.deb; do dpkg-deb -x "$deb" "$pgdir/pkg"; done
    rm -rf "$dl"
    local bin="$pgdir/pkg/usr/lib/postgresql/$major/bin" f missing="" libpq
    libpq=$(find "$pgdir/pkg/usr/lib" -name 'libpq.so.5' -print -quit 2>/dev/null || true)
    for f in postgres initdb pg_ctl psql; do
      missing+=$(LD_LIBRARY_PATH="$(dirname "${libpq:-/}")" ldd "$bin/$f" 2>/dev/null | awk '/not found/ {print $1}' | tr '\n' ' ')
    done
    if [ -z "$missing" ]; then
      [ "$(id -u)" != 0 ] || chown -R postgres: "$pgdir/pkg"
      return 0
    fi
    say "the unpacked $pkg lacks shared libraries of this system ($missing)"
    rm -rf "$pgdir/pkg"
  else
    say "apt-get download $pkg failed"
  fi
  rm -rf "$dl"
  # The package's post-installation would create and start a cluster
  # "main" of the system's: its createcluster.conf is read from
  # PGSYSCONFDIR, which says not to.
  say "installing the distribution's $pkg with apt-get (the system's packages change; no cluster is created or started)"
  local conf
  conf=$(mktemp -d)
  echo "create_main_cluster = false" >"$conf/createcluster.conf"
  chmod 755 "$conf" && chmod 644 "$conf/createcluster.conf"
  as_root env DEBIAN_FRONTEND=noninteractive PGSYSCONFDIR="$conf" apt-get install -y -qq "$pkg" >/dev/null ||
    { rm -rf "$conf"; die "apt-get install $pkg failed"; }
  rm -rf "$conf"
}

# Starts and stops of this checkout's server are one at a time (fd 8);
# every command using it holds a shared lock (fd 9) for as long as it runs,
# and the last one stops the server. Neither descriptor reaches the server
# or the command.
if command -v flock >/dev/null 2>&1; then
  exec 8>"$pgdir/start.lock" 9>"$pgdir/users.lock"
  flock -x 8
  flock -s 9
  shared=true
else
  shared=false
fi

running() { [ -f "$data/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; }

if [ -f "$data/PG_VERSION" ]; then
  data_major=$(cat "$data/PG_VERSION")
  bin=$(find_bin "$data_major") ||
    die "$data was made by PostgreSQL $data_major, whose server programs are not here: remove $pgdir to start afresh"
else
  bin=$(find_bin) || { install_bin; bin=$(find_bin) || die "no PostgreSQL server programs after the install"; }
fi
major=$(major_of "$bin")
too_old "$((major * 10000))" "$bin/postgres"
# psql and pg_isready of a downloaded package need its libpq.
if [[ "$bin" == "$pgdir"/pkg/* ]]; then
  libpq=$(find "$pgdir/pkg/usr/lib" -name 'libpq.so.5' -print -quit 2>/dev/null || true)
  [ -z "$libpq" ] || export LD_LIBRARY_PATH="$(dirname "$libpq")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# The socket's path must stay under the kernel's 108 bytes.
sockdir="$pgdir"
if [ ${#sockdir} -gt 80 ]; then
  sockdir="${TMPDIR:-/tmp}/leadintake-pg-$(printf %s "$root" | sha256sum | cut -c1-12)"
  mkdir -p "$sockdir"
  [ "$(id -u)" != 0 ] || chown postgres: "$sockdir"
fi

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

started=false
if ! running; then
  if [ ! -f "$data/PG_VERSION" ]; then
    say "creating a private PostgreSQL $major server in $data"
    rm -rf "$data"
    as_pg "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C >"$pgdir/initdb.log" 2>&1 ||
      { cat "$pgdir/initdb.log" >&2; die "initdb failed"; }
    echo "listen_addresses = '127.0.0.1'" >>"$data/postgresql.auto.conf"
  fi
  port=$(cat "$pgdir/port" 2>/dev/null || true)
  for attempt in 1 2 3 4 5; do
    # The port of the last run when it is free, else a free one; two
    # checkouts that pick the same one at once try again.
    if [ -z "$port" ] || [ "$port" = 5432 ] || ! port_free "$port"; then
      for _ in $(seq 1 100); do
        port=$((20000 + RANDOM % 40000))
        port_free "$port" && break
      done
    fi
    if as_pg "$bin/pg_ctl" -D "$data" -l "$pgdir/server.log" -w -t 60 \
      -o "-p $port -k '$sockdir'" start >"$pgdir/pg_ctl.log" 2>&1 8>&- 9>&-; then
      started=true
      break
    fi
    port=""
  done
  $started || { tail -n 20 "$pgdir/server.log" >&2 2>/dev/null; die "the private server did not start (log: $pgdir/server.log)"; }
  echo "$port" >"$pgdir/port"
  say "private PostgreSQL $major started on 127.0.0.1:$port (data: $data)"
fi
# The port of the running server: the fourth line of postmaster.pid.
port=$(sed -n 4p "$data/postmaster.pid")
$shared && flock -u 8

stop() {
  local status=$?
  trap - EXIT INT TERM
  if $shared; then
    flock -x 8
    # Only the last command using the server may take this lock.
    if flock -n -x 9; then
      as_pg "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 8>&- 9>&- &&
        say "private PostgreSQL on 127.0.0.1:$port stopped"
    fi
  else
    as_pg "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 &&
      say "private PostgreSQL on 127.0.0.1:$port stopped"
  fi
  exit "$status"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

url="postgres://postgres@127.0.0.1:$port/$database?sslmode=disable"
if [ "$database" != postgres ]; then
  psql="$bin/psql"
  [ -x "$psql" ] || psql=$(command -v psql) || die "psql (PostgreSQL's client) is needed to create the database $database"
  server="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  if ! "$psql" "$server" -Atqc "SELECT 1 FROM pg_database WHERE datname = '$database'" | grep -q 1; then
    "$psql" "$server" -qc "CREATE DATABASE \"$database\""
  fi
fi

# Not exec: the server is stopped when the command ends (bash waits for a
# command in the foreground before it runs a trap; Ctrl-C at a terminal
# reaches the command too).
export "${vars[0]}=$url" LEADINTAKE_PRIVATE_PG="$data"
export PATH="$bin:$PATH"
set +e
"$@" 8>&- 9>&-
exit $?
