package service

import (
	"errors"
	"fmt"
	"time"

	"github.com/leadintake/leadintake/lead"
)

// PersonalData is the personal-data environment that both serving
// processes and `api erase` read: the key of every hash of personal data,
// and how long keys and leads' personal data are kept. Embed it in a
// binary's configuration; Validate checks it.
type PersonalData struct {
	PIIHashKey    string        `envconfig:"PII_HASH_KEY" required:"true" desc:"at least 32 bytes: keys every hash of personal data (the look-up of leads by email, the erasure record)"`
	KeyRetention  time.Duration `envconfig:"KEY_RETENTION" default:"168h" desc:"how long a finished key is kept after it finished"`
	LeadRetention time.Duration `envconfig:"LEAD_RETENTION" default:"720h" desc:"how long a finished lead keeps its personal data (at least KEY_RETENTION); the clean-up erases it then"`
}

// Validate checks the retentions and returns the parsed hash key. A lead
// must keep its data at least as long as its key: a key that outlives its
// lead's data could be re-opened with nothing to send.
func (d *PersonalData) Validate() (lead.HashKey, error) {
	switch {
	case d.KeyRetention <= 0:
		return nil, errors.New("KEY_RETENTION must be positive")
	case d.LeadRetention < d.KeyRetention:
		return nil, errors.New("LEAD_RETENTION must be at least KEY_RETENTION: a key that outlives its lead's data could be re-opened with nothing to send")
	}
	key, err := lead.ParseHashKey(d.PIIHashKey)
	if err != nil {
		return nil, fmt.Errorf("PII_HASH_KEY: %w", err)
	}
	return key, nil
}
