package clustercfg

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/musepi/musepi/config"
	"github.com/musepi/musepi/config/internal/configtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The files the cases build on (configtest's, shared with config's tests).
const testKeyEnv = configtest.KeyEnv

var doc = configtest.Doc

// problems returns the problems of err, failing the test when err is not
// a *config.Error with some.
func problems(t *testing.T, err error) []config.Problem {
	t.Helper()
	var e *config.Error
	if !errors.As(err, &e) || len(e.Problems) == 0 {
		t.Fatalf("error %v (%T), want a *config.Error with problems", err, err)
	}
	return e.Problems
}

// The keys this package reads are checked as config checks the others,
// each problem on its key; the file's other keys are still config's.
func TestKeysValidation(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	const top = "default_model = \"openai/gpt-4o\"\n"
	for _, tc := range []struct {
		name, top string
		key, msg  string // the one problem: exactly this key, its message containing msg
	}{
		{"unknown top-level key", top + "colour = true", "colour", "unknown key (allowed: auto_redeem, cluster, default_model, history_database, history_dir, history_lease_ms, history_sync, max_response_bytes, overload, pacing, pacing_sticky_wait_ms, passivate_after_ms, providers, request_timeout_ms, retry, stream_idle_timeout_ms)"},
		{"a key of config's", top + "request_timeout_ms = -1", "request_timeout_ms", "must be 0 or more, got -1"},
		{"cluster not a table", top + "cluster = \"dev\"", "cluster", "must be a table, got a string"},
		{"history_database not a string", top + "history_database = 5", "history_database", "must be a string, got an integer"},
		{"history_database not postgres", top + "history_database = \"mysql://db/x\"", "history_database", `want a "postgres://" or "postgresql://" URL, got scheme "mysql"`},
		{"history_database no host", top + "history_database = \"postgres:///x\"", "history_database", "the URL names no host"},
		{"history_database bad parameter", top + "history_database = \"postgres://h/x?pool_max_conns=lots\"", "history_database", "pool_max_conns"},
		{"history_database and history_dir", top + "history_database = \"postgres://h/x\"\nhistory_dir = \"d\"", "history_database", "history_dir is set too"},
		{"history_database and history_sync", top + "history_database = \"postgres://h/x\"\nhistory_sync = \"turn\"", "history_sync", "applies to history files"},
		{"history_lease_ms too short", top + "history_database = \"postgres://h/x\"\nhistory_lease_ms = 50", "history_lease_ms", "must be at least 100, got 50"},
		{"history_lease_ms without a database", top + "history_lease_ms = 500", "history_lease_ms", "applies only with history_database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(doc(tc.top, "", "")))
			if cfg != nil || err == nil {
				t.Fatalf("Parse = %v, %v; want an error", cfg, err)
			}
			probs := problems(t, err)
			if len(probs) != 1 || probs[0].Key != tc.key || !strings.Contains(probs[0].Message, tc.msg) {
				t.Errorf("got\n%v\nwant the one problem %s: ...%s...", err, tc.key, tc.msg)
			}
		})
	}
}

// A change made after loading is checked again by the embedded Config's
// Validate, as config's own keys are.
func TestValidateSeesChanges(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	cfg, err := Parse([]byte(doc("", "", etcdCluster)))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Cluster.Name = "a/b"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "cluster.name: must not contain") {
		t.Errorf("Validate after a change = %v, want the cluster.name problem", err)
	}
}

// A configuration with history_database builds no options without its
// connection: RuntimeOptions says to use NewRuntime, which connects (and
// fails with the key's name when it cannot).
func TestHistoryDatabaseNeedsNewRuntime(t *testing.T) {
	t.Setenv(testKeyEnv, "k")
	cfg, err := Parse([]byte(doc("default_model = \"openai/gpt-4o\"\nhistory_database = \"postgres://127.0.0.1:1/x?connect_timeout=1\"", "", "")))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HistoryLease != 0 {
		t.Errorf("HistoryLease = %v, want 0 (DefaultHistoryLease) when left out", cfg.HistoryLease)
	}
	if _, err := cfg.RuntimeOptions(); err == nil || !strings.Contains(err.Error(), "Config.NewRuntime connects") {
		t.Errorf("RuntimeOptions = %v, want it to point at NewRuntime", err)
	}
	if _, err := cfg.NewRuntime(); err == nil || !strings.Contains(err.Error(), "history_database") {
		t.Errorf("NewRuntime on a closed port = %v, want a history_database error", err)
	}
}

// TestREADMEExamples parses the README's [cluster] examples (config's
// test parses the others).
func TestREADMEExamples(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-openai")
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllSubmatch(readme, -1) {
		if !strings.Contains(string(b[1]), "[cluster]") {
			continue
		}
		n++
		if _, err := Parse(b[1]); err != nil {
			t.Errorf("README [cluster] example %d: %v", n, err)
		}
	}
	if n == 0 {
		t.Fatal("no toml block with a [cluster] table in ../README.md")
	}
}
