package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHistoryCommand(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	damaged := `{"seq":"1","user":{"text":"a"}}` + "\nbad\n" + `{"seq":"1","user":{"text":"b"}}` + "\n" + `{"seq":"2","us`
	if err := os.WriteFile(path, []byte(damaged), 0o600); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		args    []string
		code    int
		out     []string
		errs    []string
		content string // the file afterwards ("" = unchecked)
	}{
		{[]string{"check", path}, 1,
			[]string{"2 problem(s): 2 entries, no format header", "a partial last line of 14 bytes"},
			[]string{path + ":2: not a history entry", path + ":3: seq 1 where 2 was expected", "musepi history repair"}, damaged},
		{[]string{"repair", path}, 0, []string{"repaired: 2 entries, format version 1; the original is " + path + ".bak"}, nil,
			`{"format":"musepi.history","version":1}` + "\n" + `{"seq":"1","user":{"text":"a"}}` + "\n" + `{"seq":"2","user":{"text":"b"}}` + "\n"},
		{[]string{"check", path}, 0, []string{path + ": ok: 2 entries, format version 1"}, nil, ""},
		{[]string{"repair", path}, 0, []string{"nothing to repair"}, nil, ""},
	}
	for _, st := range steps {
		code, out, errs := runCaptured(t, append([]string{"history"}, st.args...)...)
		if code != st.code {
			t.Fatalf("history %v: exit %d, want %d\nstdout %s\nstderr %s", st.args, code, st.code, out, errs)
		}
		for _, w := range st.out {
			if !strings.Contains(out, w) {
				t.Errorf("history %v: stdout %q lacks %q", st.args, out, w)
			}
		}
		for _, w := range st.errs {
			if !strings.Contains(errs, w) {
				t.Errorf("history %v: stderr %q lacks %q", st.args, errs, w)
			}
		}
		if st.content != "" {
			if b, _ := os.ReadFile(path); string(b) != st.content {
				t.Errorf("history %v: file is\n%s", st.args, b)
			}
		}
	}
	if b, _ := os.ReadFile(path + ".bak"); string(b) != damaged {
		t.Errorf("backup is %q", b)
	}
}
