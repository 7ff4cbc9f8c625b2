package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/leadintake/leadintake/client"
)

// journalVersion is the format of the journal file.
const journalVersion = 1

// record is what a journal file holds: the enquiry (key, body, supersedes)
// from before its first send, and its final response once known. Bodies
// are kept byte for byte (base64 in the file): the retry must send the same
// bytes, and the replay print the same bytes.
type record struct {
	Version    int            `json:"version"`
	Key        string         `json:"key"`
	Supersedes string         `json:"supersedes,omitempty"`
	Body       []byte         `json:"body"`
	Final      *recordedFinal `json:"final,omitempty"`
}

// recordedFinal is a key's final response.
type recordedFinal struct {
	Status int    `json:"status"`
	Body   []byte `json:"body"`
}

// journal is an open journal file.
type journal struct {
	path string
	rec  record
}

// openJournal returns the journal at path for the enquiry body. A journal
// that does not exist yet is written, with key (a new one when key is
// empty), before openJournal returns: so the key is on disk before the first
// send. One that exists must hold the same body, and agree with key and
// supersedes when they are given.
func openJournal(path string, body []byte, key, supersedes string) (*journal, error) {
	j := &journal{path: path}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if key == "" {
			key = client.NewKey()
		}
		j.rec = record{Version: journalVersion, Key: key, Supersedes: supersedes, Body: bytes.Clone(body)}
		if err := j.write(); err != nil {
			return nil, err
		}
		return j, nil
	case err != nil:
		return nil, fmt.Errorf("journal: %w", err)
	}
	if err := json.Unmarshal(data, &j.rec); err != nil || j.rec.Version != journalVersion || j.rec.Key == "" {
		return nil, usagef("%s is not a leadintake journal", path)
	}
	switch {
	case !bytes.Equal(j.rec.Body, body):
		return nil, usagef("journal %s holds another enquiry (key %s); a new enquiry needs another journal file", path, j.rec.Key)
	case key != "" && key != j.rec.Key:
		return nil, usagef("journal %s holds this enquiry under key %s, not %s", path, j.rec.Key, key)
	case supersedes != j.rec.Supersedes:
		return nil, usagef("journal %s holds this enquiry with supersedes %q, not %q", path, j.rec.Supersedes, supersedes)
	}
	return j, nil
}

// finish records the enquiry's final response. A nil journal does nothing.
func (j *journal) finish(status int, body []byte) error {
	if j == nil {
		return nil
	}
	j.rec.Final = &recordedFinal{Status: status, Body: bytes.Clone(body)}
	return j.write()
}

// write replaces the journal file with the record, atomically and durably:
// a temporary file beside it, synced, renamed over it, and the directory
// synced. A crash leaves the old file or the new one, never a torn one.
// The file is private to its owner: it holds the lead.
func (j *journal) write() error {
	data, err := json.Marshal(&j.rec)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	dir, base := filepath.Split(j.path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing to remove
	_, err = tmp.Write(append(data, '\n'))
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), j.path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
