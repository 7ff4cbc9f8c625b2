package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/leadintake/leadintake/internal/system"
)

// machine describes where the figures were taken.
type machine struct {
	NProc       int        `json:"nproc"`
	CPUModel    string     `json:"cpu_model"`
	RAMMiB      int64      `json:"ram_mib"`
	Postgres    string     `json:"postgres"`
	Go          string     `json:"go"`
	Kernel      string     `json:"kernel"`
	LoadAtStart [3]float64 `json:"load_at_start"`
}

func describeMachine(ctx context.Context, pgVersion string) machine {
	m := machine{NProc: runtime.NumCPU(), Postgres: pgVersion, Go: runtime.Version()}
	if out, err := exec.CommandContext(ctx, "go", "version").Output(); err == nil {
		m.Go = strings.TrimSpace(string(out))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if kb := procField("/proc/meminfo", "MemTotal:"); kb > 0 {
		m.RAMMiB = kb / 1024
	}
	m.LoadAtStart = loadAvg()
	return m
}

// loadAvg returns the 1, 5 and 15 minute load averages.
func loadAvg() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		l[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return l
}

// busyTests lists running `go test` and *.test processes, which make any
// figure meaningless.
func busyTests() []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		base := filepath.Base(args[0])
		switch {
		case strings.HasSuffix(base, ".test"):
			found = append(found, base)
		case base == "go" && len(args) > 1 && args[1] == "test":
			found = append(found, "go test")
		}
	}
	return found
}

// waitQuiet waits, up to maxWait, until the 1-minute load average is below
// maxLoad and no test runs. It reports what it saw.
func waitQuiet(ctx context.Context, maxLoad float64, maxWait time.Duration) error {
	deadline := time.Now().Add(maxWait)
	for {
		l, tests := loadAvg(), busyTests()
		if l[0] < maxLoad && len(tests) == 0 {
			fmt.Printf("machine quiet: load %.2f %.2f %.2f, no test running\n", l[0], l[1], l[2])
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the machine stayed busy for %s (load %.2f, tests %v)", maxWait, l[0], tests)
		}
		fmt.Printf("waiting for a quiet machine: load %.2f, tests %v\n", l[0], tests)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(15 * time.Second):
		}
	}
}

// procField returns the number after name in a /proc file of "name value kB"
// lines (/proc/meminfo, /proc/<pid>/status), or 0.
func procField(path, name string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name); ok {
			fields := strings.Fields(rest)
			if len(fields) > 0 {
				n, _ := strconv.ParseInt(fields[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// peakRSSMiB is a process's peak resident set size (VmHWM).
func peakRSSMiB(pid int) float64 {
	return float64(procField(fmt.Sprintf("/proc/%d/status", pid), "VmHWM:")) / 1024
}

// clockTick is USER_HZ, the unit of /proc CPU times (100 on Linux).
const clockTick = 100

// procTicks returns utime+stime of a process, in clock ticks, and its
// command name.
func procTicks(pid int) (int64, string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, ""
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return 0, ""
	}
	comm := s[open+1 : closing]
	f := strings.Fields(s[closing+1:])
	// Fields after the command: state is f[0]; utime and stime are the
	// 14th and 15th fields of the line, f[11] and f[12].
	if len(f) < 13 {
		return 0, comm
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st, comm
}

// cpuSnapshot is the CPU time used so far by the machine and by the
// processes the benchmark cares about.
type cpuSnapshot struct {
	at       time.Time
	busy     int64         // machine-wide, clock ticks
	pids     map[int]int64 // watched processes
	postgres map[int]int64 // every process named postgres
}

func takeCPU(pids ...int) cpuSnapshot {
	s := cpuSnapshot{at: time.Now(), pids: map[int]int64{}, postgres: map[int]int64{}}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		// cpu user nice system idle iowait irq softirq steal ...
		for i, v := range f[1:] {
			if i == 3 || i == 4 || i == 7 { // idle, iowait, steal
				continue
			}
			if i > 7 { // guest times are already in user
				break
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			s.busy += n
		}
	}
	for _, pid := range pids {
		if pid > 0 {
			s.pids[pid], _ = procTicks(pid)
		}
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if t, comm := procTicks(pid); comm == "postgres" {
			s.postgres[pid] = t
		}
	}
	return s
}

// cpuUse is CPU time in cores (CPU seconds per wall second) over a phase.
type cpuUse struct {
	Machine float64 `json:"machine"`
	// Postgres sums the server processes alive at the end of the phase
	// (pgbench's own backends have exited by then: see Machine).
	Postgres float64 `json:"postgres"`
	API      float64 `json:"api,omitempty"`
	Worker   float64 `json:"worker,omitempty"`
	// Bench is this process: the load generator and the in-process fake
	// downstream.
	Bench   float64 `json:"bench"`
	Pgbench float64 `json:"pgbench_client,omitempty"`
	// Other is the rest of Machine: other processes, and kernel work not
	// charged to a process. Much of it means the machine was not quiet.
	Other float64 `json:"other"`
}

// cpuBetween is the CPU use between two snapshots.
func cpuBetween(a, b cpuSnapshot, apiPID, workerPID int) cpuUse {
	wall := b.at.Sub(a.at).Seconds()
	cores := func(ticks int64) float64 {
		if wall <= 0 {
			return 0
		}
		return float64(ticks) / clockTick / wall
	}
	var pg int64
	for pid, t := range b.postgres {
		pg += t - a.postgres[pid]
	}
	u := cpuUse{Machine: cores(b.busy - a.busy), Postgres: cores(pg)}
	self := os.Getpid()
	u.Bench = cores(b.pids[self] - a.pids[self])
	if apiPID > 0 {
		u.API = cores(b.pids[apiPID] - a.pids[apiPID])
	}
	if workerPID > 0 {
		u.Worker = cores(b.pids[workerPID] - a.pids[workerPID])
	}
	u.Other = u.Machine - u.Postgres - u.API - u.Worker - u.Bench
	return u
}

// warner returns a warn function that prints a warning and appends it to
// list, which ends in the results.
func warner(list *[]string) func(format string, args ...any) {
	return func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		fmt.Println("WARNING:", msg)
		*list = append(*list, msg)
	}
}

// prepare starts a run of either bench: it waits for a quiet machine when
// maxLoad is set, warns when the start is not quiet, describes the machine
// and builds the binaries. remove deletes them; it is set whenever the
// error is nil.
func prepare(ctx context.Context, serverURL string, maxLoad float64, maxWait time.Duration, warn func(string, ...any)) (m machine, bins *system.Binaries, remove func(), err error) {
	if maxLoad > 0 {
		if err := waitQuiet(ctx, maxLoad, maxWait); err != nil {
			return m, nil, nil, err
		}
	}
	// The load average is only telling before the first phase: later it
	// counts the benchmark's own work. Then tests running, and the CPU of
	// other processes in each phase (cpu_cores.other), tell.
	if l, tests := loadAvg(), busyTests(); l[0] >= 1 || len(tests) > 0 {
		warn("at start: load average %.2f, tests running %v: the figures are not reliable", l[0], tests)
	}
	pgVersion, err := serverVersion(ctx, serverURL)
	if err != nil {
		return m, nil, nil, err
	}
	m = describeMachine(ctx, pgVersion)
	fmt.Printf("machine: %d CPUs (%s), %d MiB RAM, %s, %s; load %.2f %.2f %.2f\n",
		m.NProc, m.CPUModel, m.RAMMiB, pgVersion, m.Go, m.LoadAtStart[0], m.LoadAtStart[1], m.LoadAtStart[2])

	binDir, err := os.MkdirTemp("", "leadintake-bench-")
	if err != nil {
		return m, nil, nil, err
	}
	remove = func() { _ = os.RemoveAll(binDir) }
	fmt.Println("building api, worker and fakedownstream (no race detector)...")
	if bins, err = system.Build(ctx, binDir, nil); err != nil {
		remove()
		return m, nil, nil, err
	}
	return m, bins, remove, nil
}

// writeResults writes a run's results as indented JSON to path.
func writeResults(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println("results written to", path)
	return nil
}
