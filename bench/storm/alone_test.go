package main

import (
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// aloneEnv names the test that a child process (this test binary run
// again) runs by itself.
const aloneEnv = "STORM_TEST_ALONE"

// alone runs test t in a process of its own, this test binary run again
// with only t, and reports whether the caller is that process, which then
// runs the test's body. The parent runs in parallel with the package's
// other such tests: they wait on the wall clock (a storm's contenders one
// after the other), not on the CPU, and each child keeps the test's leak
// check (goleak.VerifyNone) to its own goroutines.
func alone(t *testing.T) bool {
	t.Helper()
	if os.Getenv(aloneEnv) == t.Name() {
		return true
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v",
		"-test.timeout="+flag.Lookup("test.timeout").Value.String())
	cmd.Env = append(os.Environ(), aloneEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		t.Fatalf("%s in a process of its own: %v\n%s", t.Name(), err, out)
	}
	return false
}
