package service

import (
	"fmt"
	"log/slog"

	"github.com/leadintake/leadintake/callers"
)

// WatchClients is what both serving processes do with their clients once
// started, from source (API_CLIENTS and CLIENTS_FILE) into clients: a
// clients file that group or others may read is warned about (it holds
// secrets), and the file is read again on each SIGHUP, a refused file
// leaving the clients in force. Without a clients file it does nothing:
// SIGHUP is logged and ignored.
//
// after, when given, run after each new file is in force.
func (p *Process) WatchClients(source callers.Source, clients *callers.Holder, after ...func()) {
	if source.Path == "" {
		return
	}
	warnReadable(p.Logger, source.Path)
	p.OnHangup(func() {
		warnReadable(p.Logger, source.Path)
		if err := source.Reload(clients); err != nil {
			p.Logger.Error("clients file refused; the clients in force stay", slog.String("error", err.Error()))
			return
		}
		p.Logger.Info("clients file read again", slog.Int("clients", clients.Set().Len()))
		for _, fn := range after {
			fn()
		}
	})
}

// warnReadable logs one line, naming the path and the mode (never the
// content), when others, or a group the service is not in, may read the
// clients file at path.
func warnReadable(logger *slog.Logger, path string) {
	if mode, readable := callers.ReadableByOthers(path); readable {
		logger.Warn("clients file readable by others, or by a group the service is not in: it holds secrets, make it the service's alone (chmod 600, or 640 with the service's group)",
			slog.String("path", path), slog.String("mode", fmt.Sprintf("%04o", mode)))
	}
}
