#!/usr/bin/env bash
# Makes sure a PostgreSQL server answers on the URL the tests and `make run`
# use: TEST_DATABASE_URL, else DATABASE_URL, else postgres on 127.0.0.1:5432.
# When nothing answers on the local default it starts the local cluster, and
# installs PostgreSQL from the distribution's packages where it is missing.
set -euo pipefail

url="${TEST_DATABASE_URL:-${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}}"

ready() {
  if command -v pg_isready >/dev/null 2>&1; then
    pg_isready -q -d "$url" -t 2
  else
    (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null
  fi
}

ready && exit 0

if [ -n "${TEST_DATABASE_URL:-}${DATABASE_URL:-}" ]; then
  echo "postgres.sh: nothing answers at the configured database URL; start that server first" >&2
  exit 1
fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
  echo "postgres.sh: installing PostgreSQL from the distribution's packages" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi

version=$(ls /etc/postgresql | sort -V | tail -n 1)
conf="/etc/postgresql/$version/main"
# Local development and tests only: trust connections from this machine.
if ! grep -q '^host all all 127.0.0.1/32 trust' "$conf/pg_hba.conf"; then
  as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\nlocal all all trust' "$conf/pg_hba.conf"
fi
echo "postgres.sh: starting PostgreSQL $version" >&2
as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true

for _ in $(seq 1 30); do
  ready && exit 0
  sleep 1
done
echo "postgres.sh: PostgreSQL did not come up on 127.0.0.1:5432" >&2
exit 1
