// Package system builds leadintake's binaries and runs them as real
// processes: for end-to-end tests, the benchmark and the chaos soak. A
// Process can be stopped gracefully (SIGTERM), killed (SIGKILL) and started
// again, and keeps everything it printed.
package system

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Binaries are the built commands.
type Binaries struct {
	Dir string
}

// Path returns the path of the named binary (api, worker, fakedownstream,
// leadintake).
func (b *Binaries) Path(name string) string { return filepath.Join(b.Dir, name) }

// BuildOpts configure Build.
type BuildOpts struct {
	// Race builds with the race detector.
	Race bool
}

// Build compiles ./cmd/api, ./cmd/worker, ./cmd/fakedownstream and
// ./cmd/leadintake (the client's command line) of the module that contains
// this package into dir.
func Build(ctx context.Context, dir string, opts *BuildOpts) (*Binaries, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	if opts != nil && opts.Race {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/api", "./cmd/worker", "./cmd/fakedownstream", "./cmd/leadintake")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go build: %w\n%s", err, out)
	}
	return &Binaries{Dir: dir}, nil
}

// moduleRoot finds the directory holding go.mod, from this source file.
func moduleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("system: cannot locate the module")
	}
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("system: go.mod not found")
		}
		dir = parent
	}
}

// Process is one running binary.
type Process struct {
	path string
	args []string
	env  []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	out    bytes.Buffer // everything printed, across restarts
	lines  []string     // lines of the current run
	waitc  chan struct{}
	exit   error
	listen map[string]string // log attribute -> address, from the current run
}

// Start runs path with args and env (added to a minimal environment: PATH,
// HOME) and returns once it has started.
func Start(path string, env []string, args ...string) (*Process, error) {
	p := &Process{path: path, args: args, env: env}
	return p, p.start()
}

func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, p.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", filepath.Base(p.path), err)
	}
	p.cmd, p.lines, p.listen, p.exit = cmd, nil, map[string]string{}, nil
	p.waitc = make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			p.record(sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	waitc := p.waitc
	go func() {
		err := cmd.Wait()
		pw.Close()
		<-readDone
		p.mu.Lock()
		p.exit = err
		p.mu.Unlock()
		close(waitc)
	}()
	return nil
}

func (p *Process) record(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out.WriteString(line)
	p.out.WriteByte('\n')
	p.lines = append(p.lines, line)
	if !strings.Contains(line, "addr") {
		return
	}
	var fields map[string]any
	if json.Unmarshal([]byte(line), &fields) != nil {
		return
	}
	for k, v := range fields {
		if s, ok := v.(string); ok && strings.HasSuffix(k, "addr") {
			p.listen[k] = s
		}
	}
}

// Addr waits until the current run has logged a JSON line with the
// attribute attr (such as "addr" or "admin_addr") and returns its value.
func (p *Process) Addr(ctx context.Context, attr string) (string, error) {
	for {
		p.mu.Lock()
		addr, ok := p.listen[attr]
		waitc := p.waitc
		p.mu.Unlock()
		if ok {
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s logged no %q: %w\n%s", filepath.Base(p.path), attr, ctx.Err(), p.Output())
		case <-waitc:
			return "", fmt.Errorf("%s exited before logging %q: %v\n%s", filepath.Base(p.path), attr, p.ExitErr(), p.Output())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Output returns everything the process printed, across restarts.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Lines returns the lines the current run printed so far.
func (p *Process) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// Pid returns the process id of the current run.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Done is closed when the current run has exited.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitc
}

// ExitErr returns how the current run ended (nil for exit status 0).
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// Stop sends SIGTERM and waits for the exit, up to timeout; past it the
// process is killed and an error returned. It returns the exit error.
func (p *Process) Stop(timeout time.Duration) error {
	return p.signal(syscall.SIGTERM, timeout)
}

// Quit sends SIGQUIT, on which a Go program prints the stacks of all its
// goroutines and exits, and waits up to timeout: to see where a process
// that should have done something was stuck.
func (p *Process) Quit(timeout time.Duration) {
	_ = p.signal(syscall.SIGQUIT, timeout)
}

// Kill sends SIGKILL and waits for the exit.
func (p *Process) Kill() {
	_ = p.signal(syscall.SIGKILL, time.Minute)
}

func (p *Process) signal(sig syscall.Signal, timeout time.Duration) error {
	p.mu.Lock()
	cmd, waitc := p.cmd, p.waitc
	p.mu.Unlock()
	select {
	case <-waitc:
		return p.ExitErr()
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-waitc:
		return p.ExitErr()
	case <-time.After(timeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waitc
		return fmt.Errorf("%s did not exit within %s of %s", filepath.Base(p.path), timeout, sig)
	}
}

// Restart starts the binary again, with the same arguments and environment,
// after the previous run has exited.
func (p *Process) Restart() error {
	<-p.Done()
	return p.start()
}

// Migrate runs `api migrate` on the database of dbURL and waits for it.
func (b *Binaries) Migrate(ctx context.Context, dbURL string) error {
	cmd := exec.CommandContext(ctx, b.Path("api"), "migrate")
	cmd.Env = []string{"DATABASE_URL=" + dbURL, "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("api migrate: %w\n%s", err, out)
	}
	return nil
}
