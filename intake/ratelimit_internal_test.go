package intake

import (
	"net/http"
	"net/netip"
	"testing"
	"time"
)

// The limiter's own rules, on a clock of the test's: what fills its
// tables and what empties them cannot be seen over HTTP without sending
// tens of thousands of claims.

// testClock is a clock the test moves.
type testClock struct{ t time.Time }

func (c *testClock) now() time.Time { return c.t }

func newTestLimiters(rl RateLimit) (*limiters, *testClock) {
	clock := &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := newLimiters(rl)
	l.now = clock.now
	return l, clock
}

// nthAddr is the n-th IPv4 address of 10.0.0.0/8.
func nthAddr(n int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
}

func TestLimitersBoundedPerKey(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiters(RateLimit{N: 1, Per: time.Hour})
	for i := range maxEntries {
		if ok, _ := l.allow("pk_flooded", nthAddr(i)); !ok {
			t.Fatalf("address %d of the flood refused before the table was full", i)
		}
	}
	if ok, _ := l.allow("pk_flooded", nthAddr(maxEntries)); ok {
		t.Error("a new address of the flooded key allowed past its table's bound")
	}
	// Another key's visitors have a table of their own.
	if ok, _ := l.allow("pk_other", nthAddr(0)); !ok {
		t.Error("the flood of one publishable key refused a visitor of another")
	}
}

func TestLimitersForgetRefusedCallers(t *testing.T) {
	t.Parallel()
	l, clock := newTestLimiters(RateLimit{N: 1, Per: time.Hour})
	for i := range maxEntries {
		l.allow("pk", nthAddr(i))
	}
	// Every caller keeps asking, and is refused: that keeps no bucket
	// alive, since a refused request takes nothing from it.
	clock.t = clock.t.Add(40 * time.Minute)
	for i := range maxEntries {
		if ok, _ := l.allow("pk", nthAddr(i)); ok {
			t.Fatalf("address %d allowed twice within the period", i)
		}
	}
	clock.t = clock.t.Add(21 * time.Minute)
	if ok, _ := l.allow("pk", nthAddr(maxEntries)); !ok {
		t.Error("a new visitor refused a period after the table filled: refused requests kept its buckets alive")
	}
}

func TestLimitersCountIPv6PerSlash64(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiters(RateLimit{N: 2, Per: time.Hour})
	net := netip.MustParseAddr("2001:db8:1:2::")
	for i := range 2 {
		a := net.As16()
		a[15] = byte(i + 1)
		if ok, _ := l.allow("pk", netip.AddrFrom16(a)); !ok {
			t.Fatalf("address %d of the /64 refused within the limit", i)
		}
	}
	a := net.As16()
	a[8], a[15] = 0xff, 0xff
	if ok, _ := l.allow("pk", netip.AddrFrom16(a)); ok {
		t.Error("a third address of the same /64 allowed: the /64 is one visitor")
	}
	if ok, _ := l.allow("pk", netip.MustParseAddr("2001:db8:1:3::1")); !ok {
		t.Error("the next /64 refused")
	}
	// IPv4, and IPv4 written as IPv6, count per address.
	for _, s := range []string{"192.0.2.1", "192.0.2.2", "::ffff:192.0.2.3"} {
		if ok, _ := l.allow("pk", netip.MustParseAddr(s)); !ok {
			t.Errorf("%s refused", s)
		}
	}
	for range 2 {
		l.allow("pk", netip.MustParseAddr("::ffff:192.0.2.4"))
	}
	if ok, _ := l.allow("pk", netip.MustParseAddr("192.0.2.4")); ok {
		t.Error("192.0.2.4 allowed a third time after two as ::ffff:192.0.2.4")
	}
}

func TestClientAddr(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fe80::/10")}
	for _, tt := range []struct {
		peer, xff, want string
	}{
		{"203.0.113.9:5000", "198.51.100.1", "203.0.113.9"},
		{"10.0.0.1:5000", "", "10.0.0.1"},
		{"10.0.0.1:5000", "198.51.100.1", "198.51.100.1"},
		{"10.0.0.1:5000", "198.51.100.1:8080", "198.51.100.1"},
		{"10.0.0.1:5000", "198.51.100.7, 198.51.100.1:8080, 10.0.0.2:1", "198.51.100.1"},
		{"10.0.0.1:5000", "[2001:db8::1]:443", "2001:db8::1"},
		{"10.0.0.1:5000", "[2001:db8::1]", "2001:db8::1"},
		{"10.0.0.1:5000", "2001:db8::1", "2001:db8::1"},
		{"10.0.0.1:5000", "::ffff:198.51.100.1", "198.51.100.1"},
		{"10.0.0.1:5000", "198.51.100.1, fe80::1%eth0", "198.51.100.1"},
		{"10.0.0.1:5000", "198.51.100.1, [fe80::1%eth0]:80", "198.51.100.1"},
		{"[fe80::1%eth0]:5000", "198.51.100.1", "198.51.100.1"},
		// A hop that is no address cannot be trusted past: the proxy
		// that wrote it is the caller.
		{"10.0.0.1:5000", "198.51.100.1, unknown", "10.0.0.1"},
		// Every hop trusted: the furthest, where the walk ends.
		{"10.0.0.1:5000", "10.0.0.3, 10.0.0.2", "10.0.0.3"},
	} {
		req := &http.Request{RemoteAddr: tt.peer, Header: http.Header{}}
		if tt.xff != "" {
			req.Header.Set("X-Forwarded-For", tt.xff)
		}
		if got := clientAddr(req, trusted); got.String() != tt.want {
			t.Errorf("peer %s, X-Forwarded-For %q: %s, want %s", tt.peer, tt.xff, got, tt.want)
		}
	}
}
