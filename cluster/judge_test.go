package cluster_test

import (
	"strings"
	"testing"
)

// TestJudge: the child's output passes only with every scenario done and
// no failure but races inside third-party code.
func TestJudge(t *testing.T) {
	race := func(top string) string {
		return "==================\nWARNING: DATA RACE\nWrite at 0x00c000123 by goroutine 7:\n  " + top +
			"()\n      /x.go:1 +0x1\n\nPrevious read at 0x00c000123 by goroutine 8:\n  math/rand.(*rngSource).Uint64()\n==================\n"
	}
	done := strings.Repeat("    cluster_test.go:49: "+scenarioDone+"\n", scenarios)
	for _, tc := range []struct {
		name     string
		out      string
		problems int
		done     int
	}{
		{"clean", done, 0, scenarios},
		{"third-party race", race("github.com/asynkron/protoactor-go/remote.(*endpointManager).stop") + done, 0, scenarios},
		{"race in MusePi", race("github.com/musepi/musepi/cluster.(*router).Receive") + done, 1, scenarios},
		{"scenario failure", "    cluster_test.go:70: " + failed + "s1 selected \"B\"; want A\n" + done, 1, scenarios},
		{"leak", done + "goleak: Errors on successful test run: found unexpected goroutines:\n", 1, scenarios},
		{"panic", "panic: boom\n", 1, 0},
		{"missing scenarios", strings.Repeat("    cluster_test.go:49: "+scenarioDone+"\n", scenarios-1), 0, scenarios - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := judge(tc.out)
			if len(r.problems) != tc.problems || r.done != tc.done {
				t.Fatalf("judge: %d problems %q, %d done; want %d problems, %d done", len(r.problems), r.problems, r.done, tc.problems, tc.done)
			}
		})
	}
}
