// Package pgserver runs PostgreSQL servers of their own, for the tests and
// the failover drill that need what the shared server must not be given: a
// standby, synchronous replication, a promotion, a crash. The servers live
// in a temporary directory, run as the postgres user when the caller is
// root (PostgreSQL refuses root), and are driven with PostgreSQL's own
// programs (initdb, pg_ctl, pg_basebackup) of Debian's packages.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// FindBin returns the newest PostgreSQL bin directory of Debian's packages
// (/usr/lib/postgresql/N/bin), or the one of pg_ctl on the PATH.
func FindBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		return v
	}
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) < version(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_basebackup")); err == nil {
			return dirs[i], nil
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no PostgreSQL server programs (initdb, pg_ctl, pg_basebackup): install Debian's postgresql package")
}

// FreePort returns a TCP port of 127.0.0.1 that nothing listens on now.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Dir is a temporary directory for servers' data, logs and sockets.
type Dir struct {
	// Path is the directory.
	Path string
	// Bin is PostgreSQL's bin directory.
	Bin  string
	user string // the OS user the programs run as; "" for the caller
}

// NewDir creates a directory under the system's temporary one, owned by
// the user the servers will run as.
func NewDir(bin string) (*Dir, error) {
	path, err := os.MkdirTemp("", "leadintake-pg-")
	if err != nil {
		return nil, err
	}
	d := &Dir{Path: path, Bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(path)
			return nil, errors.New("running as root, and there is no postgres user to run PostgreSQL as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(path, uid, gid); err != nil {
			os.RemoveAll(path)
			return nil, err
		}
		d.user = "postgres"
	}
	return d, nil
}

// Run runs one of PostgreSQL's programs in the directory, as the servers'
// user, and waits for it; its output is in the error.
func (d *Dir) Run(ctx context.Context, program string, args ...string) error {
	path := filepath.Join(d.Bin, program)
	var cmd *exec.Cmd
	if d.user != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", d.user, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = d.Path
	// A file, not a pipe: a server that pg_ctl starts keeps what it
	// inherited, and a pipe would never close.
	f, err := os.CreateTemp(d.Path, "."+program+"-*.out")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(f.Name())
		return fmt.Errorf("%s %s: %w\n%s", program, strings.Join(args, " "), err, out)
	}
	return nil
}

// Init creates a data directory name with initdb (user postgres, trust
// authentication) and appends conf to its settings: the port, listening
// on 127.0.0.1 only, the sockets in the directory, and fsync off (nothing
// here outlives the machine).
func (d *Dir) Init(ctx context.Context, name string, port int, conf ...string) error {
	if err := d.Run(ctx, "initdb", "-D", d.Data(name), "-U", "postgres", "--auth=trust", "-N", "-E", "UTF8", "--locale=C"); err != nil {
		return err
	}
	return d.Configure(name, append([]string{
		fmt.Sprintf("port = %d", port),
		"listen_addresses = '127.0.0.1'",
		fmt.Sprintf("unix_socket_directories = '%s'", d.Path),
		"fsync = off",
	}, conf...)...)
}

// Configure appends settings to the data directory name's
// postgresql.auto.conf (later lines win).
func (d *Dir) Configure(name string, conf ...string) error {
	f, err := os.OpenFile(filepath.Join(d.Data(name), "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strings.Join(conf, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Data returns the path of the data directory name.
func (d *Dir) Data(name string) string { return filepath.Join(d.Path, name) }

// Start starts the server of the data directory name and waits until it
// accepts connections; its log is name.log.
func (d *Dir) Start(ctx context.Context, name string) error {
	return d.Run(ctx, "pg_ctl", "-D", d.Data(name), "-l", d.Data(name)+".log", "-w", "-t", "120", "start")
}

// Stop stops the server of the data directory name: mode is immediate
// (as a crash), fast or smart.
func (d *Dir) Stop(ctx context.Context, name, mode string) error {
	return d.Run(ctx, "pg_ctl", "-D", d.Data(name), "-w", "-m", mode, "stop")
}

// Running reports whether the server of the data directory name runs.
func (d *Dir) Running(name string) bool {
	_, err := os.Stat(filepath.Join(d.Data(name), "postmaster.pid"))
	return err == nil
}

// LogTail returns the last n lines of the log of the server name.
func (d *Dir) LogTail(name string, n int) string {
	b, err := os.ReadFile(d.Data(name) + ".log")
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Remove stops every server still running in the directory (immediate)
// and removes it.
func (d *Dir) Remove(ctx context.Context) {
	entries, _ := os.ReadDir(d.Path)
	for _, e := range entries {
		if e.IsDir() && d.Running(e.Name()) {
			_ = d.Stop(ctx, e.Name(), "immediate")
		}
	}
	_ = os.RemoveAll(d.Path)
}

// URL is the URL of database on the server listening on port.
func URL(port int, database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", port, database)
}
