package service

import (
	"context"
	"testing"
)

// OpenPool's settings apply where the URL says nothing, and the URL wins
// where it does: an operator may set synchronous_commit in DATABASE_URL.
func TestOpenPoolSettings(t *testing.T) {
	t.Parallel()
	opts := PoolOpts{
		MaxConns: 7, ApplicationName: "leadintake-test",
		RuntimeParams: map[string]string{"synchronous_commit": "off", "statement_timeout": "5s"},
	}
	for _, tc := range []struct {
		url                        string
		maxConns                   int32
		app, syncCommit, statement string
	}{
		{"postgres://u@127.0.0.1:1/db", 7, "leadintake-test", "off", "5s"},
		{"postgres://u@127.0.0.1:1/db?pool_max_conns=3&application_name=mine&synchronous_commit=on", 3, "mine", "on", "5s"},
	} {
		pool, err := OpenPool(context.Background(), tc.url, opts)
		if err != nil {
			t.Fatal(err)
		}
		cfg := pool.Config()
		pool.Close()
		p := cfg.ConnConfig.RuntimeParams
		if cfg.MaxConns != tc.maxConns || p["application_name"] != tc.app || p["synchronous_commit"] != tc.syncCommit || p["statement_timeout"] != tc.statement {
			t.Errorf("%s: max %d, params %v", tc.url, cfg.MaxConns, p)
		}
	}
}
