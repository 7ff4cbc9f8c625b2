#!/usr/bin/env bash
# `make run`: the whole system on this machine. PostgreSQL (the server of
# DATABASE_URL when it is set, else the checkout's private one, which
# scripts/postgres.sh starts, and stops when this ends), the migrations, the
# fake downstream server standing in for enrichment, CRM and notification
# and serving the vendors' stand-ins (HubSpot, Salesforce, Pipedrive, Slack,
# Teams), Mailpit (a real SMTP server with a web inbox) for the demo's
# e-mails, a worker, the api, and the demo site (a lead form sending
# through the snippet with a publishable key). Ctrl-C stops everything.
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
: "${MAILPIT_SMTP_ADDR:=127.0.0.1:1025}"
: "${MAILPIT_ADDR:=127.0.0.1:8025}"
# The demo client's CRM: http (the fake downstream's CRM, leadintake's own
# protocol), or hubspot, salesforce or pipedrive (the vendor's stand-in in
# the fake downstream).
: "${DEMO_CRM:=http}"
case "$DEMO_CRM" in
  http|hubspot|salesforce|pipedrive) ;;
  *) echo "DEMO_CRM must be http, hubspot, salesforce or pipedrive, not '$DEMO_CRM'" >&2; exit 2 ;;
esac
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

# Every address must be free: another make run still going would answer in
# this one's stead.
for addr in "$API_ADDR" "$API_ADMIN_ADDR" "$WORKER_ADMIN_ADDR" "$FAKE_ADDR" "$DEMO_ADDR" "$MAILPIT_SMTP_ADDR" "$MAILPIT_ADDR"; do
  if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then
    echo "something already listens on $addr (another make run?): stop it, or choose other addresses (the top of scripts/run.sh)" >&2
    exit 1
  fi
done

go build -o bin/ ./cmd/api ./cmd/worker ./cmd/fakedownstream ./cmd/demosite ./cmd/leadintake
mkdir -p .run
# Mailpit receives the demo's e-mails; without it (it could not be
# installed) the demo sends none.
./scripts/mailpit.sh
mailpit=false
if [ -x bin/mailpit ]; then mailpit=true; fi

# The demo client's destinations: its CRM (DEMO_CRM), and its channels: the
# fake downstream's notification, a Slack bot (the Slack stand-in), and
# e-mail to Mailpit. The stand-ins' credentials are their defaults
# (bin/fakedownstream -h lists them); they guard nothing.
fake="http://$FAKE_ADDR"
destinations="destinations:
  - name: sales-slack
    kind: slack
    base_url: $fake/slack
    token: xoxb-1111111111-2222222222222-FakeFakeFakeFakeFakeFake
    channel: C0LEADS0001"
notify="notification, sales-slack"
if $mailpit; then
  destinations+="
  - name: sales-mail
    kind: email
    host: ${MAILPIT_SMTP_ADDR%:*}
    port: ${MAILPIT_SMTP_ADDR##*:}
    tls: none
    from: \"leadintake demo <leads@example.com>\"
    to: [sales@example.com]"
  notify+=", sales-mail"
fi
# The owners' ids in the CRM, where its stand-in takes any (HubSpot's
# owner ids, Salesforce's User ids).
crm="" alice_crm="" bob_crm=""
case "$DEMO_CRM" in
  hubspot) alice_crm='        crm_owner: "9001"' bob_crm='        crm_owner: "9002"' ;;
  salesforce) alice_crm='        crm_owner: 005000000000001AAA' bob_crm='        crm_owner: 005000000000002AAA' ;;
esac
case "$DEMO_CRM" in
  hubspot) crm="    crm: demo-crm"; destinations+="
  - name: demo-crm
    kind: hubspot
    base_url: $fake/hubspot
    token: hubspot-fake-token" ;;
  salesforce) crm="    crm: demo-crm"; destinations+="
  - name: demo-crm
    kind: salesforce
    base_url: $fake/salesforce
    instance_url: https://standin.my.salesforce.com
    client_id: 3MVG9standin.client.id
    client_secret: standin-client-secret
    ref_field: LeadIntake_Ref__c" ;;
  pipedrive) crm="    crm: demo-crm"; destinations+="
  - name: demo-crm
    kind: pipedrive
    base_url: $fake/pipedrive
    api_token: 0123456789abcdef0123456789abcdef01234567
    ref_field: 5e1fa2c0d6b84e33a1d3f6b0c9e27a4b8d1c0f92" ;;
esac

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
$crm
    notify: [$notify]
    owners:                        # each lead gets one, in turn
      - name: alice
        email: alice@example.com   # added to the e-mail's recipients
        slack: U0ALICE001          # mentioned in the Slack message
$alice_crm
      - name: bob
        email: bob@example.com
        slack: U0BOB00001
$bob_crm
    assign:
      - pool: [alice, bob]
$destinations
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
if $mailpit; then
  start mailpit bin/mailpit --smtp "$MAILPIT_SMTP_ADDR" --listen "$MAILPIT_ADDR" --disable-version-check --smtp-disable-rdns
fi
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

leadintake is running. Logs: .run/api.log, worker.log, fake.log, demosite.log$($mailpit && echo ", mailpit.log")
PostgreSQL: $database
Demo client: CRM $DEMO_CRM (DEMO_CRM=http|hubspot|salesforce|pipedrive), channels $notify, owners alice and bob

Open in a browser:
  demo lead form  http://$DEMO_ADDR/
                  a page of its own origin sending through its copy of the snippet
                  with a publishable key; reload it while it sends, or stop the api
  console         http://$API_ADMIN_ADDR/console/   (user demo, password $DEMO_OPERATOR_PASSWORD: an operator;
                  user guest, password $DEMO_VIEWER_PASSWORD: a viewer, who sees no enquiry)
  River UI        http://$API_ADMIN_ADDR/riverui/   (user $ADMIN_USER, password $ADMIN_PASSWORD)
$($mailpit && echo "  e-mail inbox    http://$MAILPIT_ADDR/   (Mailpit: the e-mails sales would get)" || echo "  (no e-mail inbox: Mailpit could not be installed; see above)")

Look at:
  metrics         curl -u $ADMIN_USER:$ADMIN_PASSWORD http://$API_ADMIN_ADDR/metrics   (worker: http://$WORKER_ADMIN_ADDR/metrics)
$(case "$DEMO_CRM" in
  http) echo "  the fake CRM    curl -s $fake/_fake/crm      (the records as received; the form's budget and team size are fields)" ;;
  hubspot) echo "  HubSpot         curl -s '$fake/hubspot/crm/objects/2026-09/contacts?properties=email,company,hubspot_owner_id' -H 'Authorization: Bearer hubspot-fake-token'" ;;
  pipedrive) echo "  Pipedrive       curl -s $fake/pipedrive/v1/leads -H 'X-Api-Token: 0123456789abcdef0123456789abcdef01234567'" ;;
  salesforce) echo "  Salesforce      curl -s $fake/salesforce/_standin/state   (the stand-in's Leads and tokens, counted)" ;;
esac)
  Slack           curl -s '$fake/slack/api/conversations.history?channel=C0LEADS0001' -H 'Authorization: Bearer xoxb-1111111111-2222222222222-FakeFakeFakeFakeFakeFake'
                  (the messages posted, the owner mentioned)
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
