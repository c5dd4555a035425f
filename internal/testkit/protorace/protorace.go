// Package protorace is what the tests that run several protoactor-go
// members in one process tolerate of it, and nothing more: its data races
// and the goroutines it never stops.
//
// protoactor-go (at the pinned version) has data races between members of
// one process and on shutdown: a package-level math/rand.Rand shared by
// every member's gossip (cluster/informer.go), grpclog.SetLoggerV2 called
// by every remote.Start, disthash's members read by lookups while a
// topology change writes them, and unsynchronised fields read by the
// endpoint reader and manager while remote.Shutdown writes them. The race
// detector reports them, which fails every multi-member test. Such a test
// runs in a child process (the test binary again), and its parent judges
// the child's output with Judge: it may fail on race reports whose racing
// accesses are all in third-party code, and on nothing else.
package protorace

import (
	"bufio"
	"regexp"
	"slices"
	"strings"

	"go.uber.org/goleak"
)

// Leaks are the goroutines that protoactor-go starts and never stops,
// whatever the member does: its log throttles' tickers, and the test
// provider's TTL ticker. goleak ignores them with these options.
var Leaks = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
	goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.(*Gossiper).StartGossiping.NewThrottle.func3.1"),
	goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.NewGossipActor.NewThrottleWithLogger.func2.1"),
	goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster/clusterproviders/test.(*Provider).startTtlReport.func1"),
}

// Report is what Judge read in a child's output.
type Report struct {
	Logs       []string // the child's t.Log lines (the race detector's own left out)
	Problems   []string // reasons to fail: failures, races in MusePi's code, panics, time-outs, leaks
	ThirdParty []string // the top functions of the tolerated races
	Races      int      // race reports
	Done       int      // lines with the done marker
}

var (
	accessLine = regexp.MustCompile(`^[A-Z][a-z ]* at 0x[0-9a-f]+ by .*:$`)
	logLine    = regexp.MustCompile(`^\s+\w+_test\.go:\d+: `)
)

// Judge reads a child's output (go test -v): a line with failed (a
// marker the child's failures start with; "": none) is a problem, a line
// with done (the marker of what finished) is counted, and so is every
// race report, a problem when one of its accesses is in MusePi's code.
func Judge(out, failed, done string) Report {
	var r Report
	lines := []string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for i, line := range lines {
		switch {
		case failed != "" && strings.Contains(line, failed):
			r.Problems = append(r.Problems, strings.TrimSpace(line))
		case strings.Contains(line, done):
			r.Done++
		case line == "WARNING: DATA RACE":
			r.Races++
		case accessLine.MatchString(line) && i+1 < len(lines):
			top := strings.TrimSpace(lines[i+1])
			if strings.HasPrefix(top, "github.com/musepi/musepi") {
				r.Problems = append(r.Problems, "a race in MusePi's code: "+line+" "+top)
			} else if fn := strings.TrimSuffix(top, "()"); !slices.Contains(r.ThirdParty, fn) {
				r.ThirdParty = append(r.ThirdParty, fn)
			}
		case strings.HasPrefix(line, "panic:"), strings.Contains(line, "test timed out"),
			strings.Contains(line, "found unexpected goroutines"):
			r.Problems = append(r.Problems, line)
		case logLine.MatchString(line) && !strings.Contains(line, "race detected during execution"):
			r.Logs = append(r.Logs, strings.TrimSpace(line))
		}
	}
	return r
}
