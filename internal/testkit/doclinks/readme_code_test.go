package doclinks

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// block is one fenced code block of a Markdown file: its first line's
// number (the fence's) and its text.
type block struct {
	line int
	text string
}

// fenced returns the blocks of text fenced as ```lang.
func fenced(text []byte, lang string) []block {
	var out []block
	var cur *block
	var body strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```"+lang:
			cur = &block{line: n}
			body.Reset()
		case cur != nil && trimmed == "```":
			cur.text = body.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	return out
}

// packageClause is a Go file's package clause, at the start of a line.
var packageClause = regexp.MustCompile(`(?m)^package [A-Za-z_][A-Za-z0-9_]*\s*$`)

// goDirective is the go line of a go.mod file.
var goDirective = regexp.MustCompile(`(?m)^go [0-9.]+$`)

// TestReadmeGoBlocksCompile compiles every ```go block of README.md as a
// user who pastes it would: in a module of its own that requires this one
// (replaced by the working tree, so the blocks are checked against the code
// beside them, not a published version).
//
// The convention: every ```go block in the README is a whole Go file, with
// its package clause (a program is `package main`); a block without one is
// an error, so that no snippet goes unchecked. A fragment belongs in docs/,
// or in a block marked as another language. Each block is its own package,
// and `go vet` type-checks them all at once (every error the compiler would
// report, plus vet's own findings) without linking a binary; GOPROXY=off,
// so nothing is downloaded: the module graph is this repository's, already
// in the module cache once the repository builds.
func TestReadmeGoBlocksCompile(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := fenced(readme, "go")
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block: nothing to compile (did the fence change?)")
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := goDirective.Find(gomod)
	if goLine == nil {
		t.Fatal("go.mod has no go directive")
	}
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	write := func(name string, data []byte) {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", fmt.Appendf(nil, "module readme.example\n\n%s\n\nrequire github.com/musepi/musepi v0.0.0\n\nreplace github.com/musepi/musepi => %s\n", goLine, root))
	write("go.sum", gosum)
	where := map[string]int{} // block folder → README line
	for i, b := range blocks {
		if !packageClause.MatchString(b.text) {
			t.Errorf("README.md:%d: a ```go block without a package clause: make it a whole file (package main and its imports), or move the fragment out of the README", b.line)
			continue
		}
		name := fmt.Sprintf("block%d", i+1)
		write(filepath.Join(name, "main.go"), []byte(b.text))
		where[name] = b.line
	}
	if len(where) == 0 {
		return
	}

	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH: %v", err)
	}
	cmd := exec.Command(goTool, "vet", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GOFLAGS=-mod=mod", // the temporary module's go.mod gains its indirect requirements here
		"GOPROXY=off",
		"GOWORK=off",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's Go code does not compile (go vet: %v):\n%s", err, readmePositions(string(out), where))
	}
	t.Logf("%d Go blocks of README.md compiled", len(where))
}

// blockPosition is a position in a block's file as go vet prints it.
var blockPosition = regexp.MustCompile(`(?:\./)?(block[0-9]+)[/\\]main\.go:([0-9]+)`)

// readmePositions rewrites go vet's positions in the blocks' files as
// positions in README.md (where maps a block's folder to its fence's line).
func readmePositions(out string, where map[string]int) string {
	return blockPosition.ReplaceAllStringFunc(out, func(m string) string {
		sub := blockPosition.FindStringSubmatch(m)
		line, err := strconv.Atoi(sub[2])
		if err != nil {
			return m
		}
		return fmt.Sprintf("README.md:%d", where[sub[1]]+line)
	})
}

// eventType is an event's Type method in event.go.
var eventType = regexp.MustCompile(`(?m)^func \(\*?([A-Z][A-Za-z0-9]*)\) Type\(\) string`)

// docs/embedding.md's list of events, the one list, names every Go event
// type (each type with a Type method in event.go), in backquotes.
func TestDocsListEveryEvent(t *testing.T) {
	root := repoRoot(t)
	src, err := os.ReadFile(filepath.Join(root, "event.go"))
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, m := range eventType.FindAllSubmatch(src, -1) {
		types = append(types, string(m[1]))
	}
	if len(types) < 10 {
		t.Fatalf("found %d event types in event.go (%v): did the Type methods change form?", len(types), types)
	}
	text, err := os.ReadFile(filepath.Join(root, "docs", "embedding.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range types {
		if !bytes.Contains(text, []byte("`"+typ+"`")) && !bytes.Contains(text, []byte("`"+typ+" ")) {
			t.Errorf("docs/embedding.md does not name the event %s", typ)
		}
	}
}

func TestFenced(t *testing.T) {
	text := []byte("# T\n```go\npackage main\n\nfunc main() {}\n```\n\n```sh\necho\n```\n  ```go\nx := 1\n  ```\n")
	got := fenced(text, "go")
	if len(got) != 2 || got[0].line != 2 || got[0].text != "package main\n\nfunc main() {}\n" || got[1].line != 11 || got[1].text != "x := 1\n" {
		t.Errorf("fenced: %+v", got)
	}
	if !packageClause.MatchString(got[0].text) || packageClause.MatchString(got[1].text) {
		t.Error("packageClause: wrong on the two blocks")
	}
}

func TestReadmePositions(t *testing.T) {
	got := readmePositions("vet: block2/main.go:78:18: res.Txt undefined\n./block1/main.go:3:1: x", map[string]int{"block1": 10, "block2": 101})
	want := "vet: README.md:179:18: res.Txt undefined\nREADME.md:13:1: x"
	if got != want {
		t.Errorf("readmePositions: %q, want %q", got, want)
	}
}
