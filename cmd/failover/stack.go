package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/leadintake/leadintake/downstream/fake"
	"github.com/leadintake/leadintake/internal/system"
)

// The drill's one client.
const (
	clientID   = "drill"
	token      = "drill-token-0123456789"
	piiHashKey = "PII_HASH_KEY=drill-pii-hash-key-0123456789abcdefghij"
)

// stack is the system under the drill: the fake downstream (in this
// process, so that its state can be read), one api and one worker, both
// on the cluster's two-host DATABASE_URL.
type stack struct {
	fake    *fake.Server
	fakeSrv *http.Server
	apiURL  string
	api     *system.Process
	worker  *system.Process
}

func startStack(ctx context.Context, bins *system.Binaries, dbURL, crmMode string) (_ *stack, err error) {
	s := &stack{}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	s.fake = fake.New(nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.fakeSrv = &http.Server{Handler: s.fake, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.fakeSrv.Serve(ln) }()
	fakeURL := "http://" + ln.Addr().String()

	sum := sha256.Sum256([]byte(token))
	s.api, err = system.Start(bins.Path("api"), []string{
		"DATABASE_URL=" + dbURL, "API_ADDR=127.0.0.1:0", "ADMIN_ADDR=127.0.0.1:0", piiHashKey,
		"API_CLIENTS=" + clientID + "=" + hex.EncodeToString(sum[:]),
		"SHUTDOWN_TIMEOUT=10s",
	})
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	addr, err := s.api.Addr(actx, "addr")
	if err != nil {
		return nil, err
	}
	s.apiURL = "http://" + addr

	// Short back-offs and time-outs, so that the drill drains within
	// seconds of the failover; the rest is the worker's defaults.
	s.worker, err = system.Start(bins.Path("worker"), []string{
		"DATABASE_URL=" + dbURL, "ADMIN_ADDR=127.0.0.1:0", "CRM_MODE=" + crmMode, piiHashKey,
		"ENRICHMENT_URL=" + fakeURL + "/enrichment", "CRM_URL=" + fakeURL + "/crm", "NOTIFY_URL=" + fakeURL + "/notify",
		"RETRY_BASE_DELAY=200ms", "RETRY_MAX_DELAY=2s", "JOB_TIMEOUT=10s", "RESCUE_STUCK_AFTER=20s",
		"DOWNSTREAM_TIMEOUT=2s", "RECONCILE_INTERVAL=5s", "WORKER_CONCURRENCY=20", "SHUTDOWN_TIMEOUT=10s",
	})
	if err != nil {
		return nil, err
	}
	if _, err := s.worker.Addr(actx, "admin_addr"); err != nil {
		return nil, err
	}
	return s, nil
}

// exited returns the processes that exited by themselves.
func (s *stack) exited() []string {
	var out []string
	for name, p := range map[string]*system.Process{"api": s.api, "worker": s.worker} {
		select {
		case <-p.Done():
			out = append(out, fmt.Sprintf("%s exited: %v", name, p.ExitErr()))
		default:
		}
	}
	return out
}

// stopProcesses stops the api and the worker with SIGTERM; each must exit 0
// within its SHUTDOWN_TIMEOUT and some slack.
func (s *stack) stopProcesses() []string {
	var problems []string
	if err := s.worker.Stop(30 * time.Second); err != nil {
		problems = append(problems, fmt.Sprintf("worker: %v", err))
	}
	if err := s.api.Stop(30 * time.Second); err != nil {
		problems = append(problems, fmt.Sprintf("api: %v", err))
	}
	return problems
}

func (s *stack) stop() {
	if s.worker != nil {
		s.worker.Kill()
	}
	if s.api != nil {
		s.api.Kill()
	}
	if s.fake != nil {
		s.fake.Close()
	}
	if s.fakeSrv != nil {
		_ = s.fakeSrv.Close()
	}
}
