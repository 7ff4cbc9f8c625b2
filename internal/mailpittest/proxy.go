package mailpittest

import (
	"bufio"
	"io"
	"net"
	"strings"
	"sync"
)

// Proxy forwards SMTP connections to a server, and reads the plaintext
// dialogue as it passes so that it can lose the answer to a message's
// final dot: the server has accepted the message, the client never hears
// so (its connection is closed instead), the one window in which an SMTP
// client cannot tell whether its message went. After STARTTLS (or on an
// implicit TLS port) it only forwards.
type Proxy struct {
	l      net.Listener
	target string
	parse  bool

	mu     sync.Mutex
	closed bool
	lose   int
	lost   int
	// gap is how many answers pass between two lost ones; pass how many
	// are still to pass before the next is lost.
	gap, pass int
	conns     map[net.Conn]bool
	wg        sync.WaitGroup
}

// NewProxy listens on 127.0.0.1 and forwards to target; parse is false for
// an implicit TLS port, whose bytes cannot be read.
func NewProxy(target string, parse bool) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{l: l, target: target, parse: parse, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Port is the port the proxy listens on.
func (p *Proxy) Port() int { return p.l.Addr().(*net.TCPAddr).Port }

// LoseAnswers makes the proxy lose the answer to the final dot of the next
// n messages the server accepts (a 2xx), besides those it is to lose
// already.
func (p *Proxy) LoseAnswers(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose += n
}

// LoseAnswersEvery makes the proxy lose the answer to the final dot of n
// messages the server accepts, letting gap answers through between two
// lost ones (and before the first): lost answers spread over a run rather
// than n failures in a row. It replaces any loss still to come.
func (p *Proxy) LoseAnswersEvery(n, gap int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose, p.gap, p.pass = n, gap, gap
}

// Lost is how many answers the proxy lost.
func (p *Proxy) Lost() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// Close stops listening, closes every connection and waits for them.
func (p *Proxy) Close() {
	p.l.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) forget(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.l.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			server.Close()
			return
		}
		p.conns[client], p.conns[server] = true, true
		p.wg.Add(2)
		p.mu.Unlock()
		s := &session{p: p, client: client, server: server}
		go s.clientToServer()
		go s.serverToClient()
	}
}

// session is one proxied connection. The client's lines tell when a
// message's data ends (the line "."); the server's reply after that is
// the answer to lose.
type session struct {
	p              *Proxy
	client, server net.Conn

	mu       sync.Mutex
	raw      bool // after STARTTLS: bytes only
	inData   bool // between the server's 354 and the client's final dot
	awaitDot bool // the final dot was sent: the next reply answers it
}

func (s *session) closeBoth() {
	s.client.Close()
	s.server.Close()
	s.p.forget(s.client, s.server)
}

func (s *session) state(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

func (s *session) clientToServer() {
	defer s.p.wg.Done()
	defer s.closeBoth()
	if !s.p.parse {
		_, _ = io.Copy(s.server, s.client)
		return
	}
	r := bufio.NewReader(s.client)
	for {
		var raw bool
		s.state(func() { raw = s.raw })
		if raw {
			// Whatever the reader holds was read before the switch.
			_, _ = io.Copy(s.server, r)
			return
		}
		line, err := r.ReadString('\n')
		if line != "" {
			s.state(func() {
				switch {
				case s.inData && line == ".\r\n":
					s.inData, s.awaitDot = false, true
				case !s.inData && strings.EqualFold(strings.TrimSpace(line), "STARTTLS"):
					// The server's 220 comes next; from then on both
					// sides speak TLS. The client sends nothing until it
					// has the 220, so switching now loses no line.
					s.raw = true
				}
			})
			if _, werr := io.WriteString(s.server, line); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *session) serverToClient() {
	defer s.p.wg.Done()
	defer s.closeBoth()
	if !s.p.parse {
		_, _ = io.Copy(s.client, s.server)
		return
	}
	r := bufio.NewReader(s.server)
	for {
		var raw bool
		s.state(func() { raw = s.raw })
		if raw {
			_, _ = io.Copy(s.client, r)
			return
		}
		line, err := r.ReadString('\n')
		if line != "" {
			final := len(line) >= 4 && line[3] == ' ' || len(line) == 5 // "250\r\n"
			drop := false
			if final {
				s.state(func() {
					switch {
					case strings.HasPrefix(line, "354"):
						s.inData = true
					case s.awaitDot:
						s.awaitDot = false
						if line[0] == '2' {
							s.p.mu.Lock()
							switch {
							case s.p.lose == 0:
							case s.p.pass > 0:
								s.p.pass--
							default:
								s.p.lose--
								s.p.lost++
								s.p.pass = s.p.gap
								drop = true
							}
							s.p.mu.Unlock()
						}
					}
				})
			}
			if drop {
				return // closeBoth: the client never hears the 250
			}
			if _, werr := io.WriteString(s.client, line); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
