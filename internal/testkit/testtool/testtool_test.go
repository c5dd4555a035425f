package testtool

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test ended instead of
// ending the real one.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skip(args ...any) {
	r.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

// end runs f on a recorder in a goroutine of its own, as the testing
// package runs a test, and returns the recorder once f has ended.
func end(t *testing.T, f func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestMissing(t *testing.T) {
	tool := Tool{Name: "frobnicator", Install: "apt-get install frob"}
	for _, tc := range []struct {
		ci       string
		wantSkip bool
	}{
		{ci: "", wantSkip: true},
		{ci: "false", wantSkip: true},
		{ci: "0", wantSkip: true},
		{ci: "true", wantSkip: false},
		{ci: "1", wantSkip: false},
	} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			r := end(t, func(tb testing.TB) { Missing(tb, tool, "frob not found on PATH") })
			want := "missing tool: frobnicator (install: apt-get install frob): frob not found on PATH"
			got := r.failed
			if tc.wantSkip {
				got = r.skipped
				if r.failed != "" {
					t.Fatalf("failed: %q", r.failed)
				}
			} else if r.skipped != "" {
				t.Fatalf("skipped under CI: %q", r.skipped)
			}
			if !strings.HasPrefix(got, want) || strings.Contains(got, "\n") {
				t.Errorf("line = %q, want one line starting %q", got, want)
			}
		})
	}
}

func TestNeed(t *testing.T) {
	t.Setenv("CI", "")
	var path string
	r := end(t, func(tb testing.TB) { path = Need(tb, Tmux, "go") })
	if path == "" || r.skipped != "" {
		t.Errorf("Need(go) = %q, skipped %q: want the go tool's path", path, r.skipped)
	}
	r = end(t, func(tb testing.TB) { Need(tb, Tmux, "no-such-program-musepi") })
	if want := Marker + "tmux (install: apt-get install tmux): no-such-program-musepi not found on PATH"; r.skipped != want {
		t.Errorf("skip line = %q, want %q", r.skipped, want)
	}
}
