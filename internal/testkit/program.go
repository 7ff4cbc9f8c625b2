package testkit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// programVar, set to 1 in a test binary's environment, makes it run the
// package's program instead of its tests (see MainOrProgram).
const programVar = "LEADINTAKE_TESTKIT_RUN_PROGRAM"

// MainOrProgram is the TestMain of a command's package: run as the
// package's program by RunProgram, the test binary runs program (the
// command's main) and exits 0 when it returns; otherwise it is Main.
//
// A command reads its configuration from the process's environment
// (envconfig), so a test that needs an environment of its own runs the
// command in a process of its own: the test binary itself, built already,
// with the race detector when the tests have it.
func MainOrProgram(m *testing.M, program func()) {
	if os.Getenv(programVar) == "1" {
		program()
		os.Exit(0)
	}
	Main(m)
}

// Ran is what a program run by RunProgram did.
type Ran struct {
	Code           int
	Stdout, Stderr string
}

// RunProgram runs the package's program (the test binary, under
// MainOrProgram) with args and an environment of env alone (beside PATH
// and HOME), waits for it to exit, and returns its status and output.
func RunProgram(t *testing.T, env []string, args ...string) Ran {
	t.Helper()
	cmd := StartProgram(t, env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	r := Ran{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.Code = exit.ExitCode()
	default:
		t.Fatalf("run %v: %v", args, err)
	}
	return r
}

// StartProgram returns the command that runs the package's program as
// RunProgram does, not yet started, for a test that talks to it while it
// runs (signals, listeners). It is killed, if still running, when the test
// ends.
func StartProgram(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*Patience)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append([]string{programVar + "=1", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	return cmd
}

// Environment makes env the whole environment of the test process for the
// rest of t, and restores the one it had afterwards: for the few tests that
// run a command in-process (its run function reads the process's
// environment). Like t.Setenv, it cannot be used in a parallel test, nor
// while one runs.
func Environment(t *testing.T, env map[string]string) {
	t.Helper()
	// t.Setenv refuses a parallel test, and restores this variable.
	t.Setenv(programVar, "")
	saved := os.Environ()
	os.Clearenv()
	t.Cleanup(func() {
		os.Clearenv()
		for _, kv := range saved {
			k, v, _ := strings.Cut(kv, "=")
			_ = os.Setenv(k, v)
		}
	})
	for k, v := range env {
		if err := os.Setenv(k, v); err != nil {
			t.Fatal(err)
		}
	}
}
