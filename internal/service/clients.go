package service

import (
	"log/slog"

	"github.com/leadintake/leadintake/callers"
)

// WatchClients is what both serving processes do with their clients once
// started, from source (API_CLIENTS and CLIENTS_FILE) into clients: the
// file is read again on each SIGHUP, a refused file leaving the clients in
// force. Without a clients file it does nothing: SIGHUP is logged and
// ignored.
func (p *Process) WatchClients(source callers.Source, clients *callers.Holder) {
	if source.Path == "" {
		return
	}
	p.OnHangup(func() {
		if err := source.Reload(clients); err != nil {
			p.Logger.Error("clients file refused; the clients in force stay", slog.String("error", err.Error()))
			return
		}
		p.Logger.Info("clients file read again", slog.Int("clients", clients.Set().Len()))
	})
}
