package intake

import (
	"errors"
	"math"
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

// limiters holds one token bucket per publishable key and visitor: a client
// address, or, for IPv6, its /64 (one subscriber's network: a host picks any
// address of it at will). Each publishable key has a table of its own, bounded
// by maxEntries: a flood of addresses against one key fills that key's table
// and refuses that key's new visitors, never another key's. A bucket is
// refreshed only when it gives a token: once a whole refill period has passed
// since, it is full again, the same as a new one, and it is forgotten, however
// often its caller was refused meanwhile. So memory stays bounded by the
// callers allowed in the last refill period.
type limiters struct {
	limit rate.Limit
	burst int
	// idle is how long a bucket takes to refill completely.
	idle time.Duration
	now  func() time.Time
	// maxPerKey bounds the buckets of one publishable key (maxEntries).
	maxPerKey int

	mu        sync.Mutex
	keys      map[string]*keyBuckets
	lastSweep time.Time
}

// keyBuckets are the buckets of one publishable key, by visitor.
type keyBuckets struct {
	buckets   map[netip.Prefix]*bucket
	lastSweep time.Time
}

type bucket struct {
	lim *rate.Limiter
	// taken is when the bucket last gave a token.
	taken time.Time
}

// maxEntries bounds the buckets one publishable key holds at once; past it,
// that key's new visitors are refused rather than remembered.
const maxEntries = 10_000

func newLimiters(rl RateLimit) *limiters {
	return &limiters{
		limit:     rate.Limit(float64(rl.N) / rl.Per.Seconds()),
		burst:     rl.N,
		idle:      rl.Per,
		now:       time.Now,
		maxPerKey: maxEntries,
		keys:      map[string]*keyBuckets{},
	}
}

// visitor is what one bucket counts for addr: the address, or the /64 of
// an IPv6 address (an IPv4 address written as IPv6 is the IPv4 address).
func visitor(addr netip.Addr) netip.Prefix {
	addr = addr.WithZone("").Unmap()
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p
	}
	return netip.PrefixFrom(addr, addr.BitLen())
}

// allow takes a token for the publishable key and client address, and
// reports how long to wait for one when there is none.
func (l *limiters) allow(key string, addr netip.Addr) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.sweep(now)
	kb := l.keys[key]
	if kb == nil {
		kb = &keyBuckets{buckets: map[netip.Prefix]*bucket{}, lastSweep: now}
		l.keys[key] = kb
	}
	id := visitor(addr)
	b := kb.buckets[id]
	if b == nil {
		if len(kb.buckets) >= l.maxPerKey {
			// Full: forget what a refill period has passed for, at most
			// once a second, before refusing.
			if now.Sub(kb.lastSweep) >= min(time.Second, l.idle) {
				l.sweepKey(kb, now)
			}
			if len(kb.buckets) >= l.maxPerKey {
				return false, l.idle
			}
		}
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		kb.buckets[id] = b
	}
	r := b.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		// Refused: the bucket gave nothing, so it is not refreshed.
		r.CancelAt(now)
		return false, d
	}
	b.taken = now
	return true, 0
}

// sweep forgets, at most once a refill period, the buckets that gave no
// token for a whole period, and the keys left without buckets; l.mu must be
// held.
func (l *limiters) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < l.idle {
		return
	}
	l.lastSweep = now
	for key, kb := range l.keys {
		l.sweepKey(kb, now)
		if len(kb.buckets) == 0 {
			delete(l.keys, key)
		}
	}
}

// sweepKey forgets the buckets of kb that gave no token for a whole refill
// period; l.mu must be held.
func (l *limiters) sweepKey(kb *keyBuckets, now time.Time) {
	kb.lastSweep = now
	for id, b := range kb.buckets {
		if now.Sub(b.taken) >= l.idle {
			delete(kb.buckets, id)
		}
	}
}

// retryAfter is a wait as whole seconds for Retry-After, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// clientAddr is the address of the caller: the TCP peer, or, when the peer
// is a trusted proxy, the right-most address of X-Forwarded-For that is not
// one (the furthest, when all are). A hop may be written as an address, as
// ip:port or [ipv6]:port, and with an IPv6 zone; a hop that is no address
// cannot be trusted past, and the proxy that wrote it is the caller. The
// address has no zone and is never IPv4 written as IPv6.
//
// Echo's ExtractIPFromXFFHeader walks the same way, but takes a hop with a
// port for no address (so every visitor behind such a proxy would count as
// the proxy), keeps zones (a zoned proxy is never trusted), and trusts
// private and loopback addresses unless told not to.
func clientAddr(r *http.Request, trusted []netip.Prefix) netip.Addr {
	peer, ok := parseHop(r.RemoteAddr)
	if !ok || !isTrusted(peer, trusted) {
		return peer
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	last := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			return last
		}
		if !isTrusted(a, trusted) {
			return a
		}
		last = a
	}
	return last
}

// parseHop reads one address as a peer or a proxy writes it: bare, in
// brackets, or with a port, with or without an IPv6 zone. It returns the
// address without zone, unmapped.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone("").Unmap(), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1]
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
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
