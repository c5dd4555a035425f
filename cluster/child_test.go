package cluster_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
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
// protoactor-go (at the pinned version) has data races between members of
// one process and on shutdown: a package-level math/rand.Rand shared by
// every member's gossip (cluster/informer.go), grpclog.SetLoggerV2 called by
// every remote.Start, and unsynchronised fields read by the endpoint
// reader and manager while remote.Shutdown writes them. The race detector
// reports them, which would fail every multi-member test. So the child may
// fail on race reports whose racing accesses are all in third-party code;
// the parent fails on anything else: a scenario failure, a race report with
// an access in MusePi's code, a panic, a leak, a timeout, or fewer
// finished scenarios than expected.
func runChild(t *testing.T, pattern, name string, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), childTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+pattern, "-test.v", "-test.count=1",
		"-test.timeout="+(childTimeout-10*time.Second).String())
	cmd.Env = append(os.Environ(), childEnv+"="+name)
	out, err := cmd.CombinedOutput()
	report := judge(string(out))
	for _, line := range report.logs {
		t.Log(line)
	}
	if len(report.thirdParty) > 0 {
		t.Logf("%d race reports inside protoactor-go/gRPC tolerated; racing functions: %s",
			report.races, strings.Join(report.thirdParty, ", "))
	}
	switch {
	case len(report.problems) > 0:
		t.Errorf("child %s: %v\n%s\nfull output:\n%s", name, err, strings.Join(report.problems, "\n"), out)
	case report.done < want:
		t.Errorf("child %s: %d scenarios finished; want %d (%v)\n%s", name, report.done, want, err, out)
	case err != nil && report.races == 0:
		t.Errorf("child %s failed with no race report: %v\n%s", name, err, out)
	}
}

type childReport struct {
	logs       []string // the scenarios' t.Log lines
	problems   []string // reasons to fail
	thirdParty []string // top functions of the tolerated races
	races      int
	done       int
}

var (
	accessLine = regexp.MustCompile(`^[A-Z][a-z ]* at 0x[0-9a-f]+ by .*:$`)
	logLine    = regexp.MustCompile(`^\s+\w+_test\.go:\d+: `)
)

// judge reads a child's output.
func judge(out string) childReport {
	var r childReport
	lines := []string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for i, line := range lines {
		switch {
		case strings.Contains(line, failed):
			r.problems = append(r.problems, strings.TrimSpace(line))
		case strings.Contains(line, scenarioDone):
			r.done++
		case line == "WARNING: DATA RACE":
			r.races++
		case accessLine.MatchString(line) && i+1 < len(lines):
			top := strings.TrimSpace(lines[i+1])
			if strings.HasPrefix(top, "github.com/musepi/musepi") {
				r.problems = append(r.problems, "a race in MusePi's code: "+line+" "+top)
			} else if fn := strings.TrimSuffix(top, "()"); !slices.Contains(r.thirdParty, fn) {
				r.thirdParty = append(r.thirdParty, fn)
			}
		case strings.HasPrefix(line, "panic:"), strings.Contains(line, "test timed out"),
			strings.Contains(line, "found unexpected goroutines"):
			r.problems = append(r.problems, line)
		case logLine.MatchString(line) && !strings.Contains(line, "race detected during execution"):
			r.logs = append(r.logs, strings.TrimSpace(line))
		}
	}
	return r
}
