#!/usr/bin/env bash
# Renders docs/metrics.png, docs/monitoring.md's picture of leadintake's metrics:
# the system runs locally (`make run`: api, worker, fake downstream), takes a
# few hundred submissions (some replayed, refused, or reusing a key; the fake
# downstream fails some calls and refuses a few leads), Debian's Prometheus
# server scrapes the api's and the worker's admin listeners every 2 s, and
# headless Chromium photographs Prometheus' graph page. Everything started
# here is stopped at the end, and its database dropped.
#
# Needs PostgreSQL (SHOT_DATABASE_URL, else the checkout's private server,
# which scripts/postgres.sh starts), Debian's prometheus package
# (scripts/promtool.sh installs it) and Chromium (scripts/chromium.sh).
# pngquant (Debian's pngquant package), where present, shrinks the PNG to 256
# colours.
#
# Ports and database differ from `make run`'s defaults, so that a running
# `make run` is left alone; override them with the variables below.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

# Without SHOT_DATABASE_URL, run again inside scripts/postgres.sh, which sets
# it to a database of the checkout's private server.
if [ -z "${SHOT_DATABASE_URL:-}" ]; then
  exec ./scripts/postgres.sh -v SHOT_DATABASE_URL -d leadintake_screenshot -- "$0" "$@"
fi
: "${SHOT_API_ADDR:=127.0.0.1:18080}"
: "${SHOT_API_ADMIN_ADDR:=127.0.0.1:18081}"
: "${SHOT_WORKER_ADMIN_ADDR:=127.0.0.1:18082}"
: "${SHOT_FAKE_ADDR:=127.0.0.1:19090}"
: "${SHOT_PROMETHEUS_ADDR:=127.0.0.1:19095}"
: "${SHOT_OUT:=docs/metrics.png}"
token=demo-token-change-me # scripts/run.sh's DEMO_TOKEN
admin_user=admin admin_password=admin # scripts/run.sh's ADMIN_USER, ADMIN_PASSWORD

./scripts/promtool.sh
./scripts/chromium.sh
command -v prometheus >/dev/null || { echo "screenshot-metrics.sh: no prometheus server (Debian's prometheus package)" >&2; exit 1; }
[ -x /usr/bin/chromium ] || { echo "screenshot-metrics.sh: no /usr/bin/chromium" >&2; exit 1; }

server_url="${SHOT_DATABASE_URL%/*}/postgres"
dbname="${SHOT_DATABASE_URL##*/}"; dbname="${dbname%%\?*}"
drop_db() { psql "$server_url" -qc "DROP DATABASE IF EXISTS \"$dbname\" WITH (FORCE)" >/dev/null 2>&1 || true; }

work=$(mktemp -d)
run_pid="" prom_pid=""
cleanup() {
  trap - EXIT INT TERM
  [ -n "$prom_pid" ] && kill -TERM "$prom_pid" 2>/dev/null
  # make run leads its own process group (setsid): api, worker, fake.
  [ -n "$run_pid" ] && kill -TERM -- "-$run_pid" 2>/dev/null
  wait 2>/dev/null || true
  drop_db
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# The system, on a fresh database.
drop_db
DATABASE_URL="$SHOT_DATABASE_URL" API_ADDR="$SHOT_API_ADDR" API_ADMIN_ADDR="$SHOT_API_ADMIN_ADDR" \
  WORKER_ADMIN_ADDR="$SHOT_WORKER_ADMIN_ADDR" FAKE_ADDR="$SHOT_FAKE_ADDR" \
  setsid make run >"$work/run.log" 2>&1 &
run_pid=$!
for _ in $(seq 1 300); do
  curl -fsS "http://$SHOT_API_ADDR/readyz" >/dev/null 2>&1 &&
    curl -fsS -u "$admin_user:$admin_password" "http://$SHOT_WORKER_ADMIN_ADDR/metrics" >/dev/null 2>&1 && break
  kill -0 "$run_pid" 2>/dev/null || { cat "$work/run.log" >&2; exit 1; }
  sleep 1
done
curl -fsS "http://$SHOT_API_ADDR/readyz" >/dev/null || { cat "$work/run.log" >&2; exit 1; }

# Prometheus, scraping both admin listeners every 2 s, with the alerting
# rules loaded.
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 2s
  evaluation_interval: 2s
rule_files:
  - $PWD/deploy/prometheus/alerts.yml
scrape_configs:
  - job_name: leadintake-api
    static_configs: [{targets: ["$SHOT_API_ADMIN_ADDR"]}]
    basic_auth: {username: $admin_user, password: $admin_password}
  - job_name: leadintake-worker
    static_configs: [{targets: ["$SHOT_WORKER_ADMIN_ADDR"]}]
    basic_auth: {username: $admin_user, password: $admin_password}
YAML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="$SHOT_PROMETHEUS_ADDR" >"$work/prometheus.log" 2>&1 &
prom_pid=$!
for _ in $(seq 1 60); do
  curl -fsS "http://$SHOT_PROMETHEUS_ADDR/-/ready" >/dev/null 2>&1 && break
  sleep 0.5
done
curl -fsS "http://$SHOT_PROMETHEUS_ADDR/-/ready" >/dev/null || { cat "$work/prometheus.log" >&2; exit 1; }

# The fake downstream: slower calls, some transient enrichment and CRM
# failures (retried), and a few leads the CRM refuses for good.
fake="http://$SHOT_FAKE_ADDR/_fake"
curl -fsS -X POST "$fake/chaos" -d '{"target":"all","delay_max":"150ms","seed":1}'
curl -fsS -X POST "$fake/chaos" -d '{"target":"enrichment","fail_rate":0.15,"fail_status":503,"delay_max":"200ms","seed":2}'
curl -fsS -X POST "$fake/chaos" -d '{"target":"crm_upsert","fail_rate":0.05,"fail_status":502,"delay_max":"150ms","seed":3}'

submit() { # key, body: prints the status
  curl -s -o /dev/null -w '%{http_code}\n' "http://$SHOT_API_ADDR/v1/leads" \
    -H "Authorization: Bearer $token" -H "Idempotency-Key: $1" \
    -H 'Content-Type: application/json' -d "$2"
}
lead() { printf '{"email":"lead%d@example.com","source":"%s","name":"Lead %d","company":"Company %d"}' "$1" "$2" "$1" "$1"; }
sources=(website referral linkedin ads event)

# Twelve waves, about 15 s apart: 25 new leads each (300 in all), replays
# of the previous wave, a reused key with another body, invalid bodies.
n=0
for wave in $(seq 1 12); do
  if [ $((wave % 4)) = 0 ]; then
    curl -fsS -X POST "$fake/script" -d '{"target":"crm_upsert","faults":[{"status":422},{"status":422}]}'
  fi
  (
    for i in $(seq $((n + 1)) $((n + 25))); do
      submit "shot-$i-key" "$(lead "$i" "${sources[i % 5]}")" >/dev/null &
    done
    wait
  )
  n=$((n + 25))
  for i in $(seq $((n - 24)) 3 "$n"); do
    submit "shot-$i-key" "$(lead "$i" "${sources[i % 5]}")" >/dev/null
  done
  submit "shot-$n-key" "$(lead 0 website)" >/dev/null
  submit "shot-invalid-$wave" '{"email":"not an address","source":"website"}' >/dev/null
  sleep 15
done
sleep 20 # the last leads finish, and the database-wide gauges are read again

# The picture: Prometheus' classic graph page, three graphs of the last 4 minutes.
enc() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
q=""
i=0
for expr in \
  'sum by (outcome) (rate(leadintake_submissions_total[20s]))' \
  'max by (state) (leadintake_keys)' \
  'sum by (target, result) (rate(leadintake_downstream_calls_total[20s]))'; do
  q="$q&g$i.expr=$(enc "$expr")&g$i.tab=0&g$i.stacked=0&g$i.range_input=4m"
  i=$((i + 1))
done
# Debian builds Prometheus with its classic UI (no React UI), at /classic/.
url="http://$SHOT_PROMETHEUS_ADDR/classic/graph?${q#&}"
raw="$work/metrics.png"
/usr/bin/chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --disable-sync --no-first-run --user-data-dir="$work/chromium" \
  --hide-scrollbars --window-size=1280,2560 --virtual-time-budget=20000 \
  --screenshot="$raw" "$url" >"$work/chromium.log" 2>&1 || { cat "$work/chromium.log" >&2; exit 1; }
mkdir -p "$(dirname "$SHOT_OUT")"
if command -v pngquant >/dev/null 2>&1; then
  pngquant --force --strip --speed 1 --output "$SHOT_OUT" 256 "$raw"
else
  cp "$raw" "$SHOT_OUT"
fi
echo "screenshot-metrics.sh: wrote $SHOT_OUT ($(wc -c <"$SHOT_OUT") bytes)"
