package main

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/leadintake/leadintake/intake"
)

// seedTemplate is a key finished by the real worker, with its lead: every
// seeded row is a copy of it with its own key, lead id, CRM id, external
// reference, email hash and times.
type seedTemplate struct {
	Key string
}

// seedKind says when seeded keys finished.
type seedKind struct {
	// prefix names the keys: the key of number n is the UUID form of
	// md5(prefix || n), like the random keys clients send.
	prefix string
	// The keys finished between newest and newest+spread ago.
	newest, spread time.Duration
}

var (
	// seedLive keys finished in the last week: all still within
	// KEY_RETENTION (168 h, the worker's default) for hours after seeding.
	seedLive = seedKind{prefix: "seed-", newest: time.Minute, spread: 160 * time.Hour}
	// seedExpired keys finished 7 to 28 days ago: past KEY_RETENTION, for
	// the clean-up; their leads are still within LEAD_RETENTION (720 h), so
	// the clean-up deletes the keys and erases nothing.
	seedExpired = seedKind{prefix: "expired-", newest: 169 * time.Hour, spread: 500 * time.Hour}
)

// keyRetention is the worker's KEY_RETENTION, which the bench leaves at its
// default: a seeded key expires this long after it finished.
const keyRetention = 168 * time.Hour

// seedKey is the key of number n of a kind, as seedSQL names it.
func seedKey(prefix string, n int) string {
	h := md5.Sum([]byte(prefix + strconv.Itoa(n)))
	x := hex.EncodeToString(h[:])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// seedSQL copies the template key ($2) of client $1 and its lead into the
// keys numbered $4 to $5 of prefix $3: the tables' real columns, as the
// worker's finish leaves them. Each lead gets a UUIDv7 id from its creation
// time (as the api makes them), its own CRM id (in the stored response too,
// like its lead id), the external reference the api derives from client and
// key (intake.ExternalRef), an email HMAC of its own, and a finished_at
// drawn at random between now - $6 and now - $6 - $7; the key expires $8
// after it finished. Rows are inserted in index order, as a sorted COPY
// would be.
const seedSQL = `
WITH t AS (
    SELECT k.fingerprint_hmac, k.raw_hmac, k.response_status, k.response_body::text AS body,
           k.lead_id::text AS tmpl_lead, l.crm_id AS tmpl_crm, l.submission, l.enrichment_outcome,
           l.enrichment, l.enrichment_failures, l.score, l.tier, l.crm_state, l.crm_not_updated,
           l.notify_outcome, l.notify_failures, l.warnings, l.run, l.finished_at - l.created_at AS took
    FROM idempotency_keys k JOIN leads l ON l.id = k.lead_id
    WHERE k.client_id = $1 AND k.key = $2 AND k.state = 'completed'
), g AS MATERIALIZED (
    SELECT s.n, s.key, s.finished_at, s.crm_id,
           (lpad(to_hex(floor(extract(epoch FROM s.finished_at - t.took) * 1000)::bigint), 12, '0')
            || '7' || substr(s.h, 1, 3) || '8' || substr(s.h, 4, 15))::uuid AS lead_id
    FROM (
        SELECT n, md5($3::text || n)::uuid::text AS key, md5('lead-' || $3::text || n) AS h,
               'crm_' || $3::text || n AS crm_id,
               now() - $6::interval - random() * $7::interval AS finished_at
        FROM generate_series($4::bigint, $5::bigint) n
    ) s, t
), k AS (
    INSERT INTO idempotency_keys (client_id, key, fingerprint_hmac, raw_hmac, state, lead_id, response_status, response_body,
        created_at, updated_at, finished_at, expires_at)
    SELECT $1, g.key, t.fingerprint_hmac, t.raw_hmac, 'completed', g.lead_id, t.response_status,
           replace(replace(t.body, '"' || t.tmpl_lead || '"', '"' || g.lead_id || '"'),
                   '"' || t.tmpl_crm || '"', '"' || g.crm_id || '"')::json,
           g.finished_at - t.took, g.finished_at, g.finished_at, g.finished_at + $8::interval
    FROM g, t ORDER BY g.key
)
INSERT INTO leads (id, client_id, idempotency_key, external_ref, submission, created_at, updated_at,
    enrichment_outcome, enrichment, enrichment_failures, score, tier, crm_state, crm_id, crm_not_updated,
    notify_outcome, notify_failures, warnings, finished_at, run, email_hmac)
SELECT g.lead_id, $1, g.key,
       'li_' || rtrim(translate(encode(sha256('leadintake/external_ref/v1'::bytea || '\x00'::bytea
           || convert_to($1, 'UTF8') || '\x00'::bytea || convert_to(g.key, 'UTF8')), 'base64'), '+/', '-_'), '='),
       t.submission, g.finished_at - t.took, g.finished_at, t.enrichment_outcome, t.enrichment,
       t.enrichment_failures, t.score, t.tier, t.crm_state, g.crm_id, t.crm_not_updated, t.notify_outcome,
       t.notify_failures, t.warnings, g.finished_at, t.run, sha256(convert_to('email-' || $3::text || g.n, 'UTF8'))
FROM g, t ORDER BY g.lead_id`

// seeder writes seeded rows over a connection of its own, with settings
// for bulk writes that stay in its session.
type seeder struct {
	conn  *pgx.Conn
	tmpl  seedTemplate
	chunk int
}

func newSeeder(ctx context.Context, dbURL string, tmpl seedTemplate, chunk int) (*seeder, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	// The seeded rows need not survive a crash; sorting a chunk and
	// vacuuming large indexes go faster with more memory.
	for _, q := range []string{
		"SET synchronous_commit = off", "SET work_mem = '256MB'", "SET maintenance_work_mem = '512MB'",
		"SET application_name = 'leadintake-bench-seed'",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			conn.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("seed: %s: %w", q, err)
		}
	}
	return &seeder{conn: conn, tmpl: tmpl, chunk: chunk}, nil
}

func (s *seeder) close(ctx context.Context) { s.conn.Close(context.WithoutCancel(ctx)) }

// seed inserts the keys numbered first to first+n-1 of kind, with their
// leads, one chunk per statement, printing its progress.
func (s *seeder) seed(ctx context.Context, kind seedKind, first, n int) error {
	start := time.Now()
	for lo := first; lo < first+n; lo += s.chunk {
		hi := min(lo+s.chunk, first+n) - 1
		tag, err := s.conn.Exec(ctx, seedSQL, benchClient, s.tmpl.Key, kind.prefix, lo, hi,
			kind.newest, kind.spread, keyRetention)
		if err != nil {
			return fmt.Errorf("seed %s%d..%d: %w", kind.prefix, lo, hi, err)
		}
		if want := int64(hi - lo + 1); tag.RowsAffected() != want {
			return fmt.Errorf("seed %s%d..%d: %d leads inserted, want %d (is the template key %q completed?)",
				kind.prefix, lo, hi, tag.RowsAffected(), want, s.tmpl.Key)
		}
		fmt.Printf("  seeded %d of %d %skeys (%.0f s)\n", hi-first+1, n, kind.prefix, time.Since(start).Seconds())
	}
	// The first and the last row seeded stand for the rest.
	for _, x := range []int{first, first + n - 1} {
		if err := s.check(ctx, kind, x); err != nil {
			return err
		}
	}
	return nil
}

// check reads the seeded key of number n of kind with its lead, and checks
// it against what the service writes: the template's request (fingerprint
// and raw hash, so that a replay of the bench body is recognised as it would
// be for a key the api claimed), the external reference intake
// derives from client and key, a UUIDv7 lead id of the lead's creation
// time, an email HMAC of 32 bytes, a stored response naming the lead and
// its CRM id, the key's expiry KEY_RETENTION after it finished, and a
// finished_at where kind puts it.
func (s *seeder) check(ctx context.Context, kind seedKind, n int) error {
	key := seedKey(kind.prefix, n)
	var (
		leadID                    uuid.UUID
		ref, crmID                string
		hmac, body                []byte
		created, finished, expire time.Time
		now                       time.Time
	)
	var sameRequest bool
	err := s.conn.QueryRow(ctx, `
SELECT l.id, l.external_ref, l.crm_id, l.email_hmac, k.response_body, l.created_at, k.finished_at, k.expires_at, now(),
       k.fingerprint_hmac = t.fingerprint_hmac AND k.raw_hmac IS NOT DISTINCT FROM t.raw_hmac
FROM idempotency_keys k
JOIN leads l ON l.id = k.lead_id AND l.client_id = k.client_id AND l.idempotency_key = k.key
JOIN idempotency_keys t ON t.client_id = k.client_id AND t.key = $3
WHERE k.client_id = $1 AND k.key = $2 AND k.state = 'completed' AND l.finished_at = k.finished_at`,
		benchClient, key, s.tmpl.Key).Scan(&leadID, &ref, &crmID, &hmac, &body, &created, &finished, &expire, &now, &sameRequest)
	if err != nil {
		return fmt.Errorf("seeded key %s (%s%d): %w", key, kind.prefix, n, err)
	}
	var b struct {
		Status string `json:"status"`
		LeadID string `json:"lead_id"`
		CRMID  string `json:"crm_id"`
	}
	ms := int64(binary.BigEndian.Uint64(append([]byte{0, 0}, leadID[:6]...)))
	switch {
	case !sameRequest:
		return fmt.Errorf("seeded key %s: not the template's fingerprint and raw request hash", key)
	case ref != intake.ExternalRef(benchClient, key):
		return fmt.Errorf("seeded key %s: external_ref %s, the api would write %s", key, ref, intake.ExternalRef(benchClient, key))
	case leadID.Version() != 7 || ms != created.UnixMilli():
		return fmt.Errorf("seeded key %s: lead id %s is not the UUIDv7 of its created_at %s", key, leadID, created)
	case len(hmac) != 32:
		return fmt.Errorf("seeded key %s: an email HMAC of %d bytes", key, len(hmac))
	case json.Unmarshal(body, &b) != nil || b.Status != "completed" || b.LeadID != leadID.String() || b.CRMID != crmID:
		return fmt.Errorf("seeded key %s: stored response %s does not name lead %s and CRM id %s", key, body, leadID, crmID)
	case !expire.Equal(finished.Add(keyRetention)):
		return fmt.Errorf("seeded key %s: expires at %s, finished at %s", key, expire, finished)
	case finished.After(now.Add(-kind.newest)) || finished.Before(now.Add(-kind.newest-kind.spread-time.Hour)):
		return fmt.Errorf("seeded key %s: finished at %s, outside %s to %s before %s", key, finished, kind.newest, kind.newest+kind.spread, now)
	}
	return nil
}

// vacuum runs VACUUM ANALYZE on the tables the service writes and a
// CHECKPOINT, so that a phase starts with fresh statistics, a visibility map
// and no checkpoint of earlier writes to pay for.
func (s *seeder) vacuum(ctx context.Context) error {
	for _, q := range []string{"VACUUM ANALYZE idempotency_keys, leads, river_job", "CHECKPOINT"} {
		if _, err := s.conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}
