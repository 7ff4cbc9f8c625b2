package main

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The pgbench scripts.
var (
	//go:embed claim.pgbench
	claimScript string
	//go:embed select.pgbench
	selectScript string
	//go:embed replay.pgbench
	replayScript string
)

// pgbenchResult is one pgbench run.
type pgbenchResult struct {
	Script       string  `json:"script"`
	Clients      int     `json:"clients"`
	Threads      int     `json:"threads"`
	Seconds      float64 `json:"seconds"`
	TPS          float64 `json:"tps"`
	Transactions int64   `json:"transactions"`
	Failed       int64   `json:"failed"`
	AvgMs        float64 `json:"latency_avg_ms"`
	P50Ms        float64 `json:"latency_p50_ms"`
	P99Ms        float64 `json:"latency_p99_ms"`
	CPU          cpuUse  `json:"cpu_cores"`
}

// findPgbench returns the pgbench of the server's installation: explicit,
// then pg_config's bindir, then /usr/lib/postgresql/*/bin, then PATH.
func findPgbench(explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "pgbench")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench"); len(m) > 0 {
		sort.Slice(m, func(i, j int) bool { return versionOf(m[i]) < versionOf(m[j]) })
		return m[len(m)-1], nil
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	return "", errors.New("pgbench not found: install PostgreSQL's server package or pass -pgbench")
}

func versionOf(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

// submissionVars are the variables the claim and replay scripts take: the
// canonical JSON of the bench body and its fingerprint, as the service
// receives and computes them.
func submissionVars(fingerprint [32]byte, canonical []byte) map[string]string {
	return map[string]string{
		"fingerprint": `\x` + hex.EncodeToString(fingerprint[:]),
		"submission":  string(canonical),
	}
}

// runPgbench runs one script with -M prepared and returns its figures.
func runPgbench(ctx context.Context, bin, dbURL, name, script string, clients, threads int, d time.Duration, vars map[string]string) (*pgbenchResult, error) {
	dir, err := os.MkdirTemp("", "leadintake-bench-pgbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, name+".pgbench")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		return nil, err
	}
	args := []string{
		"-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(threads),
		"-T", strconv.Itoa(max(1, int(d.Round(time.Second).Seconds()))),
		"-f", file, "--log", "--log-prefix=" + filepath.Join(dir, "log"),
	}
	for k, v := range vars {
		args = append(args, "-D", k+"="+v)
	}
	args = append(args, dbURL)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgbench %s: %w", name, err)
	}
	// CPU is sampled inside the run, while pgbench's connections (and so
	// their server processes) are alive: from 1 s in to 1 s before the end.
	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()
	var before, after cpuSnapshot
	if d >= 3*time.Second {
		sleepCtx(ctx, time.Second)
		before = takeCPU(cmd.Process.Pid)
		sleepCtx(ctx, d-2*time.Second)
		after = takeCPU(cmd.Process.Pid)
	}
	if err := <-waitc; err != nil {
		return nil, fmt.Errorf("pgbench %s: %w\n%s", name, err, out.String())
	}
	res := &pgbenchResult{Script: name, Clients: clients, Threads: threads, Seconds: d.Seconds()}
	if !before.at.IsZero() {
		res.CPU = cpuBetween(before, after, 0, 0)
		pid := cmd.Process.Pid
		res.CPU.Pgbench = float64(after.pids[pid]-before.pids[pid]) / clockTick / after.at.Sub(before.at).Seconds()
		res.CPU.Other -= res.CPU.Pgbench
	}
	for _, line := range strings.Split(out.String(), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "tps = "):
			res.TPS, _ = strconv.ParseFloat(strings.Fields(line)[2], 64)
		case strings.HasPrefix(line, "latency average = "):
			res.AvgMs, _ = strconv.ParseFloat(strings.Fields(line)[3], 64)
		case strings.HasPrefix(line, "number of transactions actually processed: "):
			f := strings.Fields(strings.TrimPrefix(line, "number of transactions actually processed: "))
			res.Transactions, _ = strconv.ParseInt(strings.Split(f[0], "/")[0], 10, 64)
		case strings.HasPrefix(line, "number of failed transactions: "):
			f := strings.Fields(strings.TrimPrefix(line, "number of failed transactions: "))
			res.Failed, _ = strconv.ParseInt(f[0], 10, 64)
		}
	}
	if res.TPS == 0 {
		return nil, fmt.Errorf("pgbench %s: no tps in its output:\n%s", name, out.String())
	}
	lat, err := readPgbenchLogs(dir)
	if err != nil {
		return nil, err
	}
	res.P50Ms, res.P99Ms = percentileMs(lat, 0.50), percentileMs(lat, 0.99)
	return res, nil
}

// readPgbenchLogs reads the per-transaction logs (client, transaction,
// latency in µs, ...).
func readPgbenchLogs(dir string) ([]time.Duration, error) {
	files, err := filepath.Glob(filepath.Join(dir, "log.*"))
	if err != nil {
		return nil, err
	}
	var lat []time.Duration
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 {
				continue
			}
			us, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil {
				continue
			}
			lat = append(lat, time.Duration(us)*time.Microsecond)
		}
		f.Close()
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, nil
}

// prefillFinished fills idempotency_keys with n finished keys of client
// 'bench' named fin-1..fin-n, for the select and replay scripts.
func prefillFinished(ctx context.Context, dbURL string, n int, fingerprint [32]byte) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range []string{
		`TRUNCATE idempotency_keys, leads, river_job`,
		`INSERT INTO idempotency_keys (client_id, key, fingerprint_hmac, state, lead_id, response_status,
            response_body, finished_at, expires_at)
         SELECT 'bench', 'fin-' || g, $1, 'completed', gen_random_uuid(), 201,
            json_build_object('status', 'completed', 'lead_id', gen_random_uuid(),
                'crm_id', 'crm_' || md5(g::text), 'score', 75, 'tier', 'warm',
                'notified', true, 'warnings', json_build_array()),
            now(), now() + interval '168 hours'
         FROM generate_series(1, ` + strconv.Itoa(n) + `) g`,
		`VACUUM ANALYZE idempotency_keys`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{fingerprint[:]}
		}
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
	}
	return nil
}
