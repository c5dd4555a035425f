//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/cluster/pgstore/pgtest"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/session"
)

// A "musepi rpc" on PostgreSQL (history_database) is killed with SIGKILL
// while its session waits out the second backoff of a retry chain. A new
// process on the same configuration opens the session (once the dead
// one's lease has run out) and the chain goes on from the record in the
// database: its next auto_retry_start is attempt 3, the prompt is answered
// (auto_retry_end success, agent_settled), and the history holds every
// turn once, seq contiguous, with no "interrupted" marker.
func TestDurableChainSurvivesKill9(t *testing.T) {
	t.Parallel() // mostly waiting on processes
	url := pgtest.Start(t).NewDatabase(t)
	srv := fakellm.New(&fakellm.Scenario{})
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	sc, err := fakellm.ParseScenario([]byte(`{"rules":[{"match":{"first":3},"respond":{"preset":"unavailable","headers":{"retry-after":"1"}}}],` +
		`"default":{"text":"back","chunks":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	srv.SetScenario(sc)
	bin := buildCommand(t)
	cfg := filepath.Join(t.TempDir(), "musepi.toml")
	writeConfig(t, cfg, fmt.Sprintf(`default_model = "fake/m1"
history_database = %q
history_lease_ms = 300
[providers.fake]
kind = "openai"
base_url = "%s/v1"
credentials = [{name = "k", api_key_env = "OPENAI_API_KEY"}]
[retry]
base_delay_ms = 20
model_fallback = false
`, url, base))

	first := spawnRPC(t, bin, "--config", cfg, "--session-id", "chat")
	first.send(`{"id":"p","type":"prompt","message":"hi"}`)
	for {
		if st := first.next("auto_retry_start", 20*time.Second); st["attempt"] == float64(2) {
			break
		}
	}
	waitRecordAttempt(t, url, "chat", 2) // committed in the step that emits the event, just after it
	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	_ = first.cmd.Wait()

	// The dead process's lease (300 ms) must run out before its session
	// opens elsewhere: until then a new process exits with "locked".
	var second *rpcProc
	for deadline := time.Now().Add(15 * time.Second); second == nil; {
		p := spawnRPCStderr(t, bin, io.Discard, "--config", cfg, "--session-id", "chat")
		p.send(`{"id":"s","type":"get_state"}`)
		select {
		case obj, ok := <-p.lines:
			if ok {
				p.seen = append(p.seen, obj)
				second = p
				continue
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the restarted process neither answered nor exited")
		}
		_ = p.stop()
		if time.Now().After(deadline) {
			t.Fatal("the session never opened in a new process")
		}
		time.Sleep(100 * time.Millisecond)
	}
	settled := second.next("agent_settled", 20*time.Second)
	if settled["success"] != true {
		t.Fatalf("agent_settled %v", settled)
	}
	expectTrace(t, second.retryTrace(),
		"agent_end willRetry=true",
		"start 3 delay=1000",
		"agent_end willRetry=false",
		"end success=true attempt=3",
		"settled success=true")
	if err := second.stop(); err != nil {
		t.Fatalf("second process: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := pgstore.Connect(ctx, url, pgstore.WithNode("checker"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l, entries, err := store.OpenContext(ctx, "chat")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var got []string
	for i, e := range entries {
		if e.GetSeq() != uint64(i+1) {
			t.Fatalf("entry %d has seq %d", i, e.GetSeq())
		}
		switch a := e.GetAssistant(); {
		case e.GetUser() != nil:
			got = append(got, "user:"+e.GetUser().GetText())
		case a != nil && a.GetErrorMessage() != "":
			got = append(got, "error")
		case a != nil:
			got = append(got, "answer")
		default:
			got = append(got, "other")
		}
	}
	if want := "user:hi error error error answer"; strings.Join(got, " ") != want {
		t.Fatalf("history %q, want %q", strings.Join(got, " "), want)
	}
}

// waitRecordAttempt polls the session's record in the database (for up to
// 10 s) until it is in a backoff of attempt.
func waitRecordAttempt(t *testing.T, url, id string, attempt int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		var data []byte
		err := conn.QueryRow(ctx, "SELECT record FROM musepi_records WHERE session_id = $1", id).Scan(&data)
		if err == nil {
			rec, found, derr := actors.DecodeRecord(history.Record{Data: data})
			if derr != nil {
				t.Fatal(derr)
			}
			if found && rec.State == session.Backoff && rec.Chain.Attempt == attempt {
				return
			}
		} else if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no record of attempt %d in backoff", attempt)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
