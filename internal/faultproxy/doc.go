// Package faultproxy is a TCP proxy that breaks on command, for tests and for
// the chaos soak program. It stands between a program and a server (in
// leadintake, PostgreSQL) and makes the network fail the ways a real one
// does:
//
//   - Cut closes every open connection at once and closes each new one as
//     soon as it is accepted, as when the server has gone away.
//   - Blackhole freezes every open connection and accepts new ones without
//     ever answering them, as when the server hangs or a firewall starts
//     dropping packets: nothing fails, nothing arrives.
//   - Restore forwards again. Bytes withheld by Blackhole are then delivered
//     (late, as TCP retransmits them when a partition heals); connections
//     closed by Cut stay closed, and the program has to connect again.
//
// A Proxy listens on 127.0.0.1 on a port of its own:
//
//	p, err := faultproxy.New("127.0.0.1:5432")
//	if err != nil { ... }
//	defer p.Close()
//	dsn := "postgres://postgres@" + p.Addr() + "/app"
//	...
//	p.Blackhole() // the database hangs
//	p.Restore()   // and comes back
//
// Close stops the proxy and returns once every goroutine it started has
// finished.
package faultproxy
