package console

import (
	"crypto/rand"
	"crypto/sha256"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/leadintake/leadintake/callers"
	"github.com/leadintake/leadintake/operator"
)

// Logins checks the console logins of the clients file in force (its
// operators). A browser sends the credentials with every request, and a
// bcrypt comparison takes tens of milliseconds by design: a pair found
// right is remembered for a while (as Caddy's basic auth does), keyed by a
// hash of the name, the password, the stored hash and the role, so that a
// new file (SIGHUP) with another hash or role, or without the login, takes
// effect at once. It is safe for concurrent use.
type Logins struct {
	holder *callers.Holder
	now    func() time.Time

	mu   sync.Mutex
	good map[[sha256.Size]byte]time.Time
}

// How long, and how many, right pairs are remembered.
const (
	loginTTL      = 10 * time.Minute
	maxRemembered = 1000
)

// NewLogins returns the Logins of the clients in h; now is the clock (nil
// for time.Now).
func NewLogins(h *callers.Holder, now func() time.Time) *Logins {
	if now == nil {
		now = time.Now
	}
	return &Logins{holder: h, now: now, good: map[[sha256.Size]byte]time.Time{}}
}

// dummyHash is compared against when the name is no login's, so that a
// wrong name takes as long as a wrong password.
var dummyHash = sync.OnceValue(func() []byte {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	h, err := bcrypt.GenerateFromPassword(secret, callers.MinBcryptCost)
	if err != nil {
		panic(err)
	}
	return h
})

// Check returns the role of the login user with password, and whether the
// pair is right.
func (l *Logins) Check(user, password string) (operator.Role, bool) {
	var op callers.Operator
	found := false
	if l.holder != nil {
		op, found = l.holder.Set().Operator(user)
	}
	if !found {
		_ = bcrypt.CompareHashAndPassword(dummyHash(), []byte(password))
		return "", false
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(user), []byte(password), op.PasswordHash, []byte(op.Role)} {
		h.Write(part)
		h.Write([]byte{0})
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	now := l.now()
	l.mu.Lock()
	until, ok := l.good[key]
	l.mu.Unlock()
	if ok && now.Before(until) {
		return operator.Role(op.Role), true
	}
	if bcrypt.CompareHashAndPassword(op.PasswordHash, []byte(password)) != nil {
		return "", false
	}
	l.mu.Lock()
	if len(l.good) >= maxRemembered {
		clear(l.good)
	}
	l.good[key] = now.Add(loginTTL)
	l.mu.Unlock()
	return operator.Role(op.Role), true
}
