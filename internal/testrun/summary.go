package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/musepi/musepi/internal/testkit/testtool"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent, with
// the build events of go test -json).
type event struct {
	Action      string
	Package     string
	ImportPath  string // build-output, build-fail
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// summary is what has been read so far.
type summary struct {
	out     io.Writer
	outputs map[string]*strings.Builder // by package and test: output not yet printed
	builds  map[string]*strings.Builder // by import path: build output
	open    map[string]bool             // packages started and not yet finished
	seen    int                         // packages finished
	failed  bool
	skipped []string // "package Test: line" of tests skipped for a tool
}

func newSummary(out io.Writer) *summary {
	return &summary{out: out, outputs: map[string]*strings.Builder{}, builds: map[string]*strings.Builder{},
		open: map[string]bool{}}
}

func key(pkg, test string) string { return pkg + "\x00" + test }

// add takes one line of input; a line that is not an event is echoed.
func (s *summary) add(line []byte) {
	var e event
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
		fmt.Fprintf(s.out, "%s\n", line)
		return
	}
	switch e.Action {
	case "build-output":
		s.buffer(s.builds, e.ImportPath).WriteString(e.Output)
	case "build-fail":
		s.failed = true
		fmt.Fprint(s.out, s.take(s.builds, e.ImportPath))
	case "start":
		s.open[e.Package] = true
	case "output":
		s.buffer(s.outputs, key(e.Package, e.Test)).WriteString(e.Output)
	case "skip", "pass", "fail":
		if e.Test != "" {
			s.testEnded(e)
		} else {
			s.packageEnded(e)
		}
	}
}

func (s *summary) buffer(m map[string]*strings.Builder, k string) *strings.Builder {
	b := m[k]
	if b == nil {
		b = &strings.Builder{}
		m[k] = b
	}
	return b
}

func (s *summary) take(m map[string]*strings.Builder, k string) string {
	b := m[k]
	delete(m, k)
	if b == nil {
		return ""
	}
	return b.String()
}

func (s *summary) testEnded(e event) {
	out := s.take(s.outputs, key(e.Package, e.Test))
	switch e.Action {
	case "fail":
		s.failed = true
		fmt.Fprint(s.out, out)
	case "skip":
		for l := range strings.Lines(out) {
			if i := strings.Index(l, testtool.Marker); i >= 0 {
				s.skipped = append(s.skipped, fmt.Sprintf("%s %s: %s", e.Package, e.Test, strings.TrimSpace(l[i:])))
			}
		}
	}
}

func (s *summary) packageEnded(e event) {
	delete(s.open, e.Package)
	s.seen++
	out := s.take(s.outputs, key(e.Package, ""))
	// A subtest's output that never got its own end event (a panic, a
	// timeout) belongs to the package's story.
	prefix := key(e.Package, "")
	var rest []string
	for k := range s.outputs {
		if strings.HasPrefix(k, prefix) {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		if e.Action == "fail" {
			out += s.outputs[k].String()
		}
		delete(s.outputs, k)
	}
	if e.Action == "fail" {
		s.failed = true
		for l := range strings.Lines(out) {
			if l != "FAIL\n" { // go test's bare line before its own "FAIL\tpkg"
				fmt.Fprint(s.out, l)
			}
		}
		return
	}
	// go test's own status line: "ok  \tpkg\t0.1s", "?   \tpkg\t[no test files]".
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, "ok  \t") || strings.HasPrefix(l, "?   \t") {
			fmt.Fprint(s.out, l)
		}
	}
}

// finish prints the end of the summary, with the time the run took, and
// returns the exit code.
func (s *summary) finish(took time.Duration) int {
	var unfinished []string
	for pkg := range s.open {
		unfinished = append(unfinished, pkg)
	}
	sort.Strings(unfinished)
	for _, pkg := range unfinished {
		fmt.Fprintf(s.out, "%sFAIL\t%s\t(no result: the test binary or go test stopped)\n", s.take(s.outputs, key(pkg, "")), pkg)
		s.failed = true
	}
	if len(s.skipped) == 0 {
		fmt.Fprintln(s.out, "skipped for want of a tool: none")
	} else {
		fmt.Fprintf(s.out, "skipped for want of a tool: %d\n", len(s.skipped))
		for _, l := range s.skipped {
			fmt.Fprintf(s.out, "  %s\n", l)
		}
	}
	switch {
	case s.seen == 0 && !s.failed:
		fmt.Fprintln(s.out, "FAIL: no test results from go test")
		return 1
	case s.failed:
		fmt.Fprintf(s.out, "FAIL (in %s)\n", took.Round(time.Second))
		return 1
	}
	fmt.Fprintf(s.out, "PASS: %d packages in %s\n", s.seen, took.Round(time.Second))
	return 0
}
