// Package scratchdb gives tests and tools (the benchmark, the soak) a
// PostgreSQL database of their own on a shared server, and drops it after.
package scratchdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
)

// DefaultServerURL is the server used when no URL is set: the local one.
const DefaultServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// ServerURL returns the server tests and tools use: TEST_DATABASE_URL, else
// DATABASE_URL, else DefaultServerURL.
func ServerURL(getenv func(string) string) string {
	for _, name := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := getenv(name); v != "" {
			return v
		}
	}
	return DefaultServerURL
}

// WithDatabase returns databaseURL naming the database name (unchanged when
// name is empty), with params added to its query.
func WithDatabase(databaseURL, name string, params map[string]string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil || u.Scheme == "" {
		return "", errors.New("the database URL must be a postgres:// URL")
	}
	if name != "" {
		u.Path = "/" + name
	}
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Redacted returns databaseURL without its password, for messages.
func Redacted(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// DB is a database created by Create.
type DB struct {
	// Name is the database's name: the prefix and random hexadecimal digits.
	Name string
	// URL is the server's URL naming the database.
	URL       string
	serverURL string
}

// Create creates a database named prefix plus random digits on the server
// of serverURL, as a copy of template when template is not empty.
func Create(ctx context.Context, serverURL, prefix, template string) (*DB, error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w (is PostgreSQL running? make test runs a private one: scripts/postgres.sh)", Redacted(serverURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	sql := "CREATE DATABASE " + name
	if template != "" {
		sql += " TEMPLATE " + template
	}
	if _, err := conn.Exec(ctx, sql); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	dbURL, err := WithDatabase(serverURL, name, nil)
	if err != nil {
		return nil, err
	}
	return &DB{Name: name, URL: dbURL, serverURL: serverURL}, nil
}

// Drop drops the database, closing whatever connections it still has.
func (db *DB) Drop(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, db.serverURL)
	if err != nil {
		return fmt.Errorf("drop %s: %w", db.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db.Name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop %s: %w", db.Name, err)
	}
	return nil
}
