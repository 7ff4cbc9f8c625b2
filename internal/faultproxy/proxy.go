package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// DialTimeout bounds the proxy's connection to its target. A connection the
// target does not accept in time is closed, as if the target had refused it.
const DialTimeout = 10 * time.Second

// mode is what the proxy does with traffic.
type mode int

const (
	forwarding mode = iota
	cutting
	blackholing
	closed
)

// Proxy forwards every TCP connection it accepts to one target address, and
// fails on command (Cut, Blackhole) until Restore. Its methods are safe for
// concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	// ctx is cancelled by Close: it stops dials in progress.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts every goroutine the proxy starts; Close waits for it.
	wg sync.WaitGroup

	mu   sync.Mutex
	mode mode
	// changed is closed, and replaced, at every change of mode: connections
	// held by a blackhole wait on it.
	changed chan struct{}
	links   map[*link]struct{}
}

// link is one accepted connection and, once it has been dialled, the
// connection to the target that it is forwarded to.
type link struct {
	client   net.Conn
	upstream net.Conn           // nil until dialled
	stopDial context.CancelFunc // nil unless dialling
	dead     bool
}

// New returns a proxy listening on 127.0.0.1 on a free port and forwarding
// every connection to target (host:port). Stop it with Close.
func New(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target:  target,
		ln:      ln,
		ctx:     ctx,
		cancel:  cancel,
		changed: make(chan struct{}),
		links:   map[*link]struct{}{},
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the host:port the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every open connection, and closes each new one as soon as it is
// accepted, until Restore: the program sees its server go away.
func (p *Proxy) Cut() { p.setMode(cutting) }

// Blackhole freezes every open connection (what was already on its way may
// still arrive; nothing more does, either way) and accepts new connections
// without ever dialling the target, until Restore or Cut: the program sees
// its server hang. Nothing is closed: connections accepted meanwhile are
// held until Restore, Cut or Close, even those whose client has given up.
func (p *Proxy) Blackhole() { p.setMode(blackholing) }

// Restore forwards again: new connections are forwarded, frozen ones resume
// and deliver what they withheld, and connections accepted during a
// blackhole are dialled through. Connections closed by Cut stay closed.
func (p *Proxy) Restore() { p.setMode(forwarding) }

// Close stops the proxy: it stops listening, closes every connection, and
// returns once every goroutine the proxy started has finished. Calling it again
// does nothing and returns nil.
func (p *Proxy) Close() error {
	var err error
	if p.setMode(closed) {
		err = p.ln.Close()
		p.cancel()
	}
	p.wg.Wait()
	return err
}

// setMode switches to m, closing every connection for cutting and closed. It
// reports whether the mode changed; a closed proxy stays closed.
func (p *Proxy) setMode(m mode) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == closed {
		return false
	}
	p.mode = m
	close(p.changed)
	p.changed = make(chan struct{})
	if m == cutting || m == closed {
		for l := range p.links {
			p.killLocked(l)
		}
	}
	return true
}

// killLocked closes both sides of l and forgets it. p.mu must be held.
func (p *Proxy) killLocked(l *link) {
	if l.dead {
		return
	}
	l.dead = true
	_ = l.client.Close()
	if l.upstream != nil {
		_ = l.upstream.Close()
	}
	if l.stopDial != nil {
		l.stopDial()
	}
	delete(p.links, l)
}

func (p *Proxy) kill(l *link) {
	p.mu.Lock()
	p.killLocked(l)
	p.mu.Unlock()
}

// accept serves the listener until Close.
func (p *Proxy) accept() {
	defer p.wg.Done()
	var backoff time.Duration
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || p.ctx.Err() != nil {
				return
			}
			// Out of file descriptors, say: wait a little before trying
			// again, as net/http does, rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return
			}
			continue
		}
		backoff = 0

		p.mu.Lock()
		if p.mode == cutting || p.mode == closed {
			p.mu.Unlock()
			_ = conn.Close()
			continue
		}
		l := &link{client: conn}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

// serve dials the target for l and forwards both ways until both sides have
// finished or the link is killed.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer p.kill(l)

	// A connection accepted during a blackhole waits here, undialled.
	if !p.pass(l) {
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, DialTimeout)
	defer cancel()
	p.mu.Lock()
	if l.dead {
		p.mu.Unlock()
		return
	}
	l.stopDial = cancel
	p.mu.Unlock()

	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", p.target)
	if err != nil {
		return // the client sees its connection closed, as if refused
	}
	p.mu.Lock()
	if l.dead {
		p.mu.Unlock()
		_ = up.Close()
		return
	}
	l.upstream, l.stopDial = up, nil
	p.mu.Unlock()

	done := make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(done)
		p.pipe(l, up, l.client)
	}()
	p.pipe(l, l.client, up)
	<-done
}

// pipe copies src to dst, holding each chunk while the proxy blackholes. When
// src ends it half-closes dst, so that a peer that shuts down its sending
// side is seen to do so; on any error it kills the whole link, which also
// ends the pipe going the other way.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass(l) {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				p.kill(l)
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) && p.pass(l) {
				if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
					return
				}
			}
			p.kill(l)
			return
		}
	}
}

// pass waits while the proxy blackholes and reports whether l may carry
// traffic: true when forwarding, false once l is dead.
func (p *Proxy) pass(l *link) bool {
	for {
		p.mu.Lock()
		dead, m, changed := l.dead, p.mode, p.changed
		p.mu.Unlock()
		switch {
		case dead:
			return false
		case m == forwarding:
			return true
		case m == blackholing:
			<-changed
		default: // cutting or closed kill every link; l is about to be dead
			return false
		}
	}
}
