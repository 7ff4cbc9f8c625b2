#!/usr/bin/env bash
# `make run`: the whole system on this machine. PostgreSQL (the server of
# DATABASE_URL when it is set, else the checkout's private one, which
# scripts/postgres.sh starts, and stops when this ends), the migrations, the
# fake downstream server standing in for enrichment, CRM and notification, a
# worker, the api, and the demo site (a lead form sending through the
# snippet with a publishable key). Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
# The toolchain of the Makefile, also when this script is run on its own.
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

# Without DATABASE_URL, run again inside scripts/postgres.sh, which sets it
# to the database leadintake of the private server.
if [ -z "${DATABASE_URL:-}" ]; then
  exec ./scripts/postgres.sh -v DATABASE_URL -d leadintake -- "$0" "$@"
fi
: "${API_ADDR:=127.0.0.1:8080}"
: "${API_ADMIN_ADDR:=127.0.0.1:8081}"
: "${WORKER_ADMIN_ADDR:=127.0.0.1:8082}"
: "${FAKE_ADDR:=127.0.0.1:9090}"
: "${DEMO_ADDR:=127.0.0.1:8090}"
# The api as the demo page's browser reaches it.
: "${DEMO_API_URL:=http://$API_ADDR}"
: "${DEMO_TOKEN:=demo-token-change-me}"
# Publishable keys are public by design: this one only lets the demo site's
# pages submit and poll.
: "${DEMO_PUBLISHABLE_KEY:=pk_demo_local_0123456789abcdef}"
# Standard Webhooks secrets of the demo client (demo values: set your own):
# the callbacks it receives at the fake, and the webhooks it may send.
: "${DEMO_CALLBACK_SECRET:=whsec_ZGVtby1jYWxsYmFjay1zZWNyZXQtY2hhbmdlLW1l}"
: "${DEMO_WEBHOOK_SECRET:=whsec_ZGVtby13ZWJob29rLXNlY3JldC1jaGFuZ2UtbWU=}"
: "${ADMIN_USER:=admin}"
: "${ADMIN_PASSWORD:=admin}"
# The console's demo logins (the clients file's operators): one that acts,
# one that only looks. Demo values: set your own.
: "${DEMO_OPERATOR_PASSWORD:=demo-operator-password}"
: "${DEMO_VIEWER_PASSWORD:=demo-viewer-password}"
# Keys every hash of personal data; a demo value: set your own.
: "${PII_HASH_KEY:=demo-pii-hash-key-change-me-0123456789}"
export DATABASE_URL ADMIN_USER ADMIN_PASSWORD PII_HASH_KEY

# PostgreSQL: the server of DATABASE_URL must answer (and be 14 or later);
# the database is created when missing.
server_url="${DATABASE_URL%/*}/postgres"
./scripts/postgres.sh -v DATABASE_URL -- true
dbname="${DATABASE_URL##*/}"; dbname="${dbname%%\?*}"
if ! psql "$server_url" -Atqc "SELECT 1 FROM pg_database WHERE datname = '$dbname'" | grep -q 1; then
  psql "$server_url" -qc "CREATE DATABASE \"$dbname\""
fi

go build -o bin/ ./cmd/api ./cmd/worker ./cmd/fakedownstream ./cmd/demosite ./cmd/leadintake
mkdir -p .run

# The demo client: its bearer token, the publishable key of the demo
# site's pages (both spellings of its origin), its callback (the fake's
# receiver, which checks the signatures) and its inbound webhook secret.
hash=$(printf %s "$DEMO_TOKEN" | sha256sum | cut -d' ' -f1)
operator_hash=$(printf '%s\n' "$DEMO_OPERATOR_PASSWORD" | bin/api hash-password --cost 10)
viewer_hash=$(printf '%s\n' "$DEMO_VIEWER_PASSWORD" | bin/api hash-password --cost 10)
demo_port="${DEMO_ADDR##*:}"
cat > .run/clients.yaml.tmp <<YAML
operators:                         # the console's logins, besides ADMIN_USER
  - name: demo
    password_bcrypt: '$operator_hash'
    role: operator
  - name: guest
    password_bcrypt: '$viewer_hash'
    role: viewer
clients:
  - id: demo
    tokens_sha256: [$hash]
    publishable_keys:
      - key: $DEMO_PUBLISHABLE_KEY
        origins: [http://$DEMO_ADDR, http://localhost:$demo_port]
        spam: {}                   # judged: a honeypot, at least 2 s on the form
    callback:
      url: http://$FAKE_ADDR/callbacks/demo
      secret: $DEMO_CALLBACK_SECRET
    webhook_secret: $DEMO_WEBHOOK_SECRET
YAML
# It holds secrets: the service's user's alone (the processes warn otherwise).
chmod 600 .run/clients.yaml.tmp
mv .run/clients.yaml.tmp .run/clients.yaml
LOG_FORMAT=text bin/api migrate

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo; echo "stopping..."
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap 'cleanup; exit 0' INT TERM
trap cleanup EXIT

start() { # name, then the command
  local name=$1; shift
  "$@" > ".run/$name.log" 2>&1 &
  pids+=($!)
}

start fake env FAKE_ADDR="$FAKE_ADDR" FAKE_CALLBACK_SECRET="$DEMO_CALLBACK_SECRET" bin/fakedownstream
start worker env LOG_FORMAT=text ADMIN_ADDR="$WORKER_ADMIN_ADDR" CLIENTS_FILE=.run/clients.yaml \
  ENRICHMENT_URL="http://$FAKE_ADDR/enrichment" CRM_URL="http://$FAKE_ADDR/crm" NOTIFY_URL="http://$FAKE_ADDR/notify" \
  RETRY_BASE_DELAY=500ms RECONCILE_INTERVAL=10s bin/worker
start api env LOG_FORMAT=text API_ADDR="$API_ADDR" ADMIN_ADDR="$API_ADMIN_ADDR" CLIENTS_FILE=.run/clients.yaml bin/api
start demosite env LOG_FORMAT=text DEMO_ADDR="$DEMO_ADDR" DEMO_API_URL="$DEMO_API_URL" \
  DEMO_PUBLISHABLE_KEY="$DEMO_PUBLISHABLE_KEY" bin/demosite

for _ in $(seq 1 50); do
  curl -fsS "http://$API_ADDR/readyz" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -fsS "http://$API_ADDR/readyz" >/dev/null || { echo "the api did not become ready; see .run/api.log"; exit 1; }
for _ in $(seq 1 50); do
  curl -fsS "http://$DEMO_ADDR/" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -fsS "http://$DEMO_ADDR/" >/dev/null || { echo "the demo site did not start; see .run/demosite.log"; exit 1; }

if [ -n "${LEADINTAKE_PRIVATE_PG:-}" ]; then
  database="$DATABASE_URL (this checkout's own server, data in ${LEADINTAKE_PRIVATE_PG#$PWD/}; Ctrl-C stops it too)"
else
  database="$(sed -E 's#://([^:@/]*):[^@/]*@#://\1:***@#' <<<"$DATABASE_URL")"
fi

# What to open, look at and try. Pages a browser opens go in the first
# block, one line each (name, URL, a note): the first place a user looks.
cat <<MSG

leadintake is running. Logs: .run/api.log, worker.log, fake.log, demosite.log
PostgreSQL: $database

Open in a browser:
  demo lead form  http://$DEMO_ADDR/
                  a page of its own origin sending through its copy of the snippet
                  with a publishable key; reload it while it sends, or stop the api
  console         http://$API_ADMIN_ADDR/console/   (user demo, password $DEMO_OPERATOR_PASSWORD: an operator;
                  user guest, password $DEMO_VIEWER_PASSWORD: a viewer, who sees no enquiry)
  River UI        http://$API_ADMIN_ADDR/riverui/   (user $ADMIN_USER, password $ADMIN_PASSWORD)

Look at:
  metrics         curl -u $ADMIN_USER:$ADMIN_PASSWORD http://$API_ADMIN_ADDR/metrics   (worker: http://$WORKER_ADMIN_ADDR/metrics)
  the fake CRM    curl -s http://$FAKE_ADDR/_fake/crm      (the records as received; the form's budget and team size are fields)
  deliveries      curl -s http://$FAKE_ADDR/_fake/state    (CRM, notifications, and the signed callbacks, verified)
  the API         curl -s http://$API_ADDR/openapi.json

Try:
  # submit a lead (run it twice: the second answer is replayed)
  curl -i http://$API_ADDR/v1/leads \\
    -H 'Authorization: Bearer $DEMO_TOKEN' \\
    -H 'Idempotency-Key: demo-key-0001' -H 'Content-Type: application/json' \\
    -d '{"email":"ada@example.com","source":"referral","name":"Ada","company":"Analytical Engines"}'

  # poll it; a new enquiry needs a new key
  curl -s http://$API_ADDR/v1/operations/demo-key-0001 -H 'Authorization: Bearer $DEMO_TOKEN'

  # or let the CLI keep the retry contract (a new key, retries, the wait)
  echo '{"email":"grace@example.com","source":"website","name":"Grace"}' |
    LEADINTAKE_URL=http://$API_ADDR LEADINTAKE_TOKEN=$DEMO_TOKEN bin/leadintake submit

  # the form judges spam: send it within 2 seconds of loading the page (or
  # fill in its hidden honeypot) and it thanks you, but the enquiry is
  # quarantined; look at it, and release it to the CRM
  export DATABASE_URL='$DATABASE_URL' PII_HASH_KEY='$PII_HASH_KEY' CLIENTS_FILE=.run/clients.yaml
  bin/api spam list
  bin/api spam release --client demo KEY
  # or in the console: Quarantine, tick it, Release

Ctrl-C stops everything.
MSG

wait -n "${pids[@]}" || true
echo "a process exited unexpectedly; see .run/*.log"
exit 1
