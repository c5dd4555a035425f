package main

import (
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/musepi/musepi/internal/testkit/protorace"
)

// aloneEnv names the test that a child process (this test binary run
// again) runs by itself.
const aloneEnv = "STORM_TEST_ALONE"

// aloneDone ends the output of a child's test that runs a cluster
// (aloneChecked): protoactor-go's data races between the members of one
// process fail it under the race detector (t.Failed counts them too), so
// its parent judges its output instead (protorace): the test logs nothing
// but its failures and this, and only the tolerated races may fail it.
const aloneDone = "storm test: the end of its checks"

// alone runs test t in a process of its own, this test binary run again
// with only t, and reports whether the caller is that process, which then
// runs the test's body. The parent runs in parallel with the package's
// other such tests: they wait on the wall clock (a storm's contenders one
// after the other), not on the CPU, and each child keeps the test's leak
// check (goleak.VerifyNone) to its own goroutines. The child passes, or
// (a test that runs a cluster) fails on protoactor-go's races alone after
// its checks passed.
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
	if err == nil && strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		return false
	}
	r := protorace.Judge(string(out), "", aloneDone)
	if r.Done != 1 || r.Races == 0 || len(r.Problems) > 0 || len(r.Logs) > 0 { // a log line is a failure
		t.Fatalf("%s in a process of its own: %v\n%s", t.Name(), err, out)
	}
	t.Logf("%d race reports inside protoactor-go tolerated; racing functions: %s", r.Races, strings.Join(r.ThirdParty, ", "))
	return false
}

// aloneChecked ends a child's test that runs a cluster: its leak check,
// protoactor-go's own goroutines left out, then aloneDone.
func aloneChecked(t *testing.T) {
	t.Helper()
	goleak.VerifyNone(t, protorace.Leaks...)
	t.Log(aloneDone)
}
