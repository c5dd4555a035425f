package cluster_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/internal/testkit/protorace"
)

// childEnv names the membership whose scenarios a child process runs.
const childEnv = "MUSEPI_CLUSTER_CHILD"

// Markers in the child's output: failed starts every scenario failure,
// scenarioDone ends every scenario that passed.
const (
	failed       = "scenario failed: "
	scenarioDone = "scenario done"
)

// scenarios is how many scenarios a child of TestSharedActors runs.
const scenarios = 5

// childTimeout bounds one child process.
const childTimeout = 4 * time.Minute

// runChild runs the test functions matching pattern in a child process
// (this test binary, with childEnv=name) and judges its output: want
// scenarios must finish.
//
// protoactor-go has data races between members of one process
// (internal/testkit/protorace), which the race detector reports: the
// child may fail on race reports whose racing accesses are all in
// third-party code; the parent fails on anything else: a scenario failure,
// a race report with an access in MusePi's code, a panic, a leak, a
// timeout, or fewer finished scenarios than expected.
func runChild(t *testing.T, pattern, name string, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), childTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+pattern, "-test.v", "-test.count=1",
		"-test.timeout="+(childTimeout-10*time.Second).String())
	cmd.Env = append(os.Environ(), childEnv+"="+name)
	out, err := cmd.CombinedOutput()
	report := protorace.Judge(string(out), failed, scenarioDone)
	for _, line := range report.Logs {
		t.Log(line)
	}
	if len(report.ThirdParty) > 0 {
		t.Logf("%d race reports inside protoactor-go/gRPC tolerated; racing functions: %s",
			report.Races, strings.Join(report.ThirdParty, ", "))
	}
	switch {
	case len(report.Problems) > 0:
		t.Errorf("child %s: %v\n%s\nfull output:\n%s", name, err, strings.Join(report.Problems, "\n"), out)
	case report.Done < want:
		t.Errorf("child %s: %d scenarios finished; want %d (%v)\n%s", name, report.Done, want, err, out)
	case err != nil && report.Races == 0:
		t.Errorf("child %s failed with no race report: %v\n%s", name, err, out)
	}
}
