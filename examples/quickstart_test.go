package examples

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/internal/testkit/testbin"
	"github.com/musepi/musepi/provider/fakellm"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := programs.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// The README's embedding snippet is examples/quickstart/main.go, whole, so
// that the build (and go vet, and staticcheck) checks what people paste.
func TestReadmeShowsQuickstart(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	program, err := os.ReadFile("quickstart/main.go")
	if err != nil {
		t.Fatal(err)
	}
	const open = "```go\n"
	_, section, ok := strings.Cut(string(readme), "\n## Embedding\n")
	if !ok {
		t.Fatal(`README.md has no "## Embedding" section`)
	}
	_, block, ok := strings.Cut(section, open)
	block, _, closed := strings.Cut(block, "\n```\n")
	if !ok || !closed {
		t.Fatal(`README.md's "## Embedding" section has no Go code block`)
	}
	if block+"\n" != string(program) {
		t.Errorf("README.md's embedding snippet differs from examples/quickstart/main.go: copy the file into the README\n--- README:\n%s\n--- file:\n%s", block, program)
	}
}

// The quickstart against the fake server: the first call fails with a 503
// and the session retries; with a history directory it cannot create, it
// exits 1 with the reason instead of panicking.
func TestQuickstartRuns(t *testing.T) {
	llm := fakellm.New(&fakellm.Scenario{
		Rules:   []fakellm.Rule{{Match: fakellm.Match{First: 1}, Respond: fakellm.Respond{Preset: "unavailable"}}},
		Default: &fakellm.Respond{Text: "Hello from the fake model."},
	})
	base, err := llm.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = llm.Close() })
	exe := example(t, "quickstart")
	var environ []string // without the variables it reads
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPENAI_") {
			environ = append(environ, kv)
		}
	}
	env := append(environ, "OPENAI_BASE_URL="+base+"/v1", "OPENAI_API_KEY=sk-main", "OPENAI_API_KEY_2=sk-backup")

	run := func(t *testing.T, dir string, env ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, exe)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Run("an unset second key", func(t *testing.T) {
		// Not the first key twice: nothing starts, and no request is sent.
		out, err := run(t, t.TempDir(), append(environ, "OPENAI_BASE_URL="+base+"/v1", "OPENAI_API_KEY=sk-main")...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 ||
			!strings.Contains(out, `WithProvider("openai"): credential "backup": APIKeyEnv: environment variable OPENAI_API_KEY_2 is not set`) {
			t.Errorf("quickstart: %v, want exit status 1 naming the backup key:\n%s", err, out)
		}
		if n := llm.Stats().Total; n != 0 {
			t.Errorf("the server saw %d requests, want none", n)
		}
	})
	t.Run("answers after a retry", func(t *testing.T) {
		dir := t.TempDir()
		out, err := run(t, dir, env...)
		if err != nil {
			t.Fatalf("quickstart: %v\n%s", err, out)
		}
		for _, w := range []string{"retry 1/10 in ", "(transient)", "Hello from the fake model."} {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
		if files, _ := filepath.Glob(filepath.Join(dir, "musepi-sessions", "*")); len(files) == 0 {
			t.Errorf("no history file in %s/musepi-sessions", dir)
		}
	})
	t.Run("a history directory it cannot create", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "musepi-sessions"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := run(t, dir, env...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || strings.Contains(out, "panic") ||
			!strings.Contains(out, "start the runtime: ") {
			t.Errorf("quickstart: %v, want exit status 1 with the reason:\n%s", err, out)
		}
	})
}

// programs are the example programs, obtained by one `go build` of them
// all (cheaper than one build each: they share the compiled packages).
var programs = testbin.NewSet(
	"github.com/musepi/musepi/examples/quickstart",
	"github.com/musepi/musepi/examples/embed",
	"github.com/musepi/musepi/examples/team",
	"github.com/musepi/musepi/examples/customprovider",
)

// example returns the path of the built example program name (its
// directory under examples/), building them all on first use.
func example(t *testing.T, name string) string {
	t.Helper()
	if err := programs.Build(context.Background()); err != nil {
		t.Fatal(err)
	}
	return programs.Path("github.com/musepi/musepi/examples/" + name)
}
