package intake

import (
	"errors"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimit is how many new submissions one publishable key may make from
// one client address: Per time, in bursts of up to N.
type RateLimit struct {
	N   int
	Per time.Duration
}

// ParseRateLimit reads N/s, N/m or N/h.
func ParseRateLimit(s string) (RateLimit, error) {
	n, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	count, err := strconv.Atoi(n)
	per := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[unit]
	if !ok || err != nil || count < 1 || per == 0 {
		return RateLimit{}, errors.New("want N/s, N/m or N/h with N at least 1")
	}
	return RateLimit{N: count, Per: per}, nil
}

// limiters holds one token bucket per publishable key and client address.
// A bucket idle long enough to be full again is the same as a new one: it is
// forgotten, so that memory stays bounded by the callers of the last
// refill period; past maxEntries, new callers are refused rather than
// remembered.
type limiters struct {
	limit rate.Limit
	burst int
	// idle is how long a bucket takes to refill completely.
	idle time.Duration
	now  func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// maxEntries bounds the buckets held at once.
const maxEntries = 100_000

func newLimiters(rl RateLimit) *limiters {
	return &limiters{
		limit:   rate.Limit(float64(rl.N) / rl.Per.Seconds()),
		burst:   rl.N,
		idle:    rl.Per,
		now:     time.Now,
		buckets: map[string]*bucket{},
	}
}

// allow takes a token for the publishable key and address, and reports how
// long to wait for one when there is none.
func (l *limiters) allow(key, addr string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.sweep(now)
	id := key + "\x00" + addr
	b := l.buckets[id]
	if b == nil {
		if len(l.buckets) >= maxEntries {
			return false, l.idle
		}
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[id] = b
	}
	b.seen = now
	r := b.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// sweep forgets the buckets idle for a whole refill period, at most once a
// period; l.mu must be held.
func (l *limiters) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < l.idle {
		return
	}
	l.lastSweep = now
	for id, b := range l.buckets {
		if now.Sub(b.seen) >= l.idle {
			delete(l.buckets, id)
		}
	}
}

// retryAfter is a wait as whole seconds for Retry-After, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// clientAddr is the address of the caller: the TCP peer, or, when the peer
// is a trusted proxy, the right-most address of X-Forwarded-For that is not
// one.
func clientAddr(r *http.Request, trusted []netip.Prefix) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !isTrusted(peer, trusted) {
		return host
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			// A hop that is not an address cannot be trusted past.
			return peer.String()
		}
		if !isTrusted(a.Unmap(), trusted) {
			return a.Unmap().String()
		}
	}
	return peer.String()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// ParseTrustedProxies reads comma-separated CIDRs (or single addresses).
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !strings.Contains(part, "/") {
			a, err := netip.ParseAddr(part)
			if err != nil {
				return nil, errors.New("want comma-separated CIDRs such as 10.0.0.0/8")
			}
			part = netip.PrefixFrom(a, a.BitLen()).String()
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, errors.New("want comma-separated CIDRs such as 10.0.0.0/8")
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
