package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// The testdata files are `go test -json ./...` of a small module: tests
// that pass, skip for a tool and for another reason, fail in a subtest,
// panic, and a package that does not build.
func TestSummary(t *testing.T) {
	for _, tc := range []struct {
		name     string
		input    string // a testdata file, or the input itself
		code     int
		want     []string // lines the summary holds
		dontWant []string
	}{
		{name: "skips", input: "testdata/skips.jsonl", code: 0,
			want: []string{"ok  \tex/a\t", "?   \tex/c\t[no test files]", "skipped for want of a tool: 1",
				"  ex/a TestSkip: missing tool: etcd (install: apt-get install etcd-server): etcd not found on PATH", "PASS: 2 packages in 2m31s"},
			dontWant: []string{"not under the race detector", "a_test.go:3: hi", "FAIL"}},
		{name: "failures", input: "testdata/failures.jsonl", code: 1,
			want: []string{"b/b_test.go:3:31: declared and not used: x", "FAIL\tex/b [build failed]",
				"    a_test.go:5: boom", "--- FAIL: TestFail/sub", "FAIL\tex/a\t0.072s", "skipped for want of a tool: 1"},
			dontWant: []string{"a_test.go:3: hi", "PASS"}},
		{name: "panic", input: "testdata/panic.jsonl", code: 1,
			want: []string{"panic: boom", "FAIL\tex/a\t"}},
		{name: "a package that never finished", code: 1,
			input: `{"Action":"start","Package":"ex/a"}` + "\n" +
				`{"Action":"output","Package":"ex/a","Output":"signal: killed\n"}` + "\n",
			want: []string{"signal: killed", "FAIL\tex/a\t(no result"}},
		{name: "nothing", input: "", code: 1, want: []string{"FAIL: no test results"}},
		{name: "not json", input: "go: cannot find main module\n", code: 1,
			want: []string{"go: cannot find main module", "FAIL: no test results"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			input := tc.input
			if strings.HasPrefix(input, "testdata/") {
				b, err := os.ReadFile(input)
				if err != nil {
					t.Fatal(err)
				}
				input = string(b)
			}
			var out bytes.Buffer
			s := newSummary(&out)
			for l := range strings.Lines(input) {
				s.add([]byte(strings.TrimSuffix(l, "\n")))
			}
			if code := s.finish(151 * time.Second); code != tc.code {
				t.Errorf("exit code %d, want %d", code, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("summary lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.dontWant {
				if strings.Contains(out.String(), w) {
					t.Errorf("summary holds %q:\n%s", w, out.String())
				}
			}
		})
	}
}
