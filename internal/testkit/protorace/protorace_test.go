package protorace_test

import (
	"strings"
	"testing"

	"github.com/musepi/musepi/internal/testkit/protorace"
)

// The markers of the judged outputs.
const (
	failed = "scenario failed: "
	done   = "scenario done"
)

// TestJudge: the child's output passes only with every scenario done and
// no failure but races inside third-party code.
func TestJudge(t *testing.T) {
	const scenarios = 5
	race := func(top string) string {
		return "==================\nWARNING: DATA RACE\nWrite at 0x00c000123 by goroutine 7:\n  " + top +
			"()\n      /x.go:1 +0x1\n\nPrevious read at 0x00c000123 by goroutine 8:\n  math/rand.(*rngSource).Uint64()\n==================\n"
	}
	all := strings.Repeat("    cluster_test.go:49: "+done+"\n", scenarios)
	for _, tc := range []struct {
		name     string
		out      string
		problems int
		done     int
		logs     int
	}{
		{"clean", all, 0, scenarios, 0},
		{"third-party race", race("github.com/asynkron/protoactor-go/remote.(*endpointManager).stop") + all, 0, scenarios, 0},
		{"race in MusePi", race("github.com/musepi/musepi/cluster.(*router).Receive") + all, 1, scenarios, 0},
		{"scenario failure", "    cluster_test.go:70: " + failed + "s1 selected \"B\"; want A\n" + all, 1, scenarios, 0},
		{"leak", all + "goleak: Errors on successful test run: found unexpected goroutines:\n", 1, scenarios, 0},
		{"panic", "panic: boom\n", 1, 0, 0},
		{"missing scenarios", strings.Repeat("    cluster_test.go:49: "+done+"\n", scenarios-1), 0, scenarios - 1, 0},
		{"a log line, and the race detector's", "    x_test.go:3: 36 sessions\n    testing.go:1712: race detected during execution of test\n" + all,
			0, scenarios, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := protorace.Judge(tc.out, failed, done)
			if len(r.Problems) != tc.problems || r.Done != tc.done || len(r.Logs) != tc.logs {
				t.Fatalf("Judge: %d problems %q, %d done, logs %q; want %d problems, %d done, %d logs",
					len(r.Problems), r.Problems, r.Done, r.Logs, tc.problems, tc.done, tc.logs)
			}
		})
	}
}
