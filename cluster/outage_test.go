package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/cluster/pgstore/pgtest"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/provider/openai"
)

// TestPromptsThroughADatabaseRestart: 100 sessions of a node prompt, one
// prompt after the other, through the fake LLM server (each answer
// streamed over 200 ms); once 100 prompts are done, PostgreSQL restarts
// as `pg_ctl restart -m fast` does, at once or after 3 s down. Every prompt succeeds (the
// history writes that meet the restart are retried), and every answer is
// in its session's history in the database, after its prompt.
//
// Its members share a process, so it runs in a child (runChild), where
// protoactor-go's own races are tolerated (a BlockList read unlocked by
// the gossip loop once failed it).
func TestPromptsThroughADatabaseRestart(t *testing.T) {
	downs := []time.Duration{0, 3 * time.Second}
	switch os.Getenv(childEnv) {
	case "":
		t.Parallel() // with the other children: it mostly waits
		runChild(t, "^TestPromptsThroughADatabaseRestart$", "restart", len(downs))
		return
	case "restart":
	default:
		t.Skip("another child")
	}
	for _, down := range downs {
		t.Run(fmt.Sprintf("down %s", down), func(t *testing.T) {
			promptThroughRestart(t, down)
			// Not reached after a Fatal; Errors are caught by their prefix
			// (t.Failed would count the tolerated races too).
			t.Log(scenarioDone)
		})
	}
}

func promptThroughRestart(t *testing.T, down time.Duration) {
	const (
		sessions = 100
		rounds   = 5
		answer   = "answer from fakellm"
	)
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	sc, err := fakellm.ParseScenario([]byte(`{"default": {"text": "` + answer + `", "chunks": 4, "chunk_delay_ms": 50}}`))
	if err != nil {
		t.Fatal(err)
	}
	llm := fakellm.New(sc)
	base, err := llm.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer llm.Close()
	var storeLog strings.Builder
	var logMu sync.Mutex
	store, err := pgstore.Connect(context.Background(), url, pgstore.WithNode("node"),
		pgstore.WithLogger(slog.New(zerolog.NewSlogHandler(zerolog.New(zerolog.SyncWriter(lockedWriter{&logMu, &storeLog})).Level(zerolog.InfoLevel)))))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := cluster.Join(context.Background(), cluster.JoinConfig{Name: clusterName(t),
		Membership: cluster.InProcess(test.NewInMemAgent()), Store: store},
		musepi.WithProvider("fake", openai.New(openai.Config{BaseURL: base + "/v1"}), musepi.Credential{Name: "k", APIKey: "key"}))
	if err != nil {
		_ = store.Close()
		t.Fatal(err)
	}
	defer func() {
		if err := rt.Shutdown(context.Background()); err != nil {
			t.Error(failed, err)
		}
	}()
	handles := make([]*musepi.Session, sessions)
	for i := range handles {
		if handles[i], err = rt.NewSession(context.Background(), musepi.WithSessionID(fmt.Sprintf("s%03d", i)), musepi.WithModel("fake/m1")); err != nil {
			t.Fatal(err)
		}
	}

	type outcome struct {
		text string // the prompt's
		err  error
		took time.Duration
	}
	results := make([][]outcome, sessions)
	var (
		wg       sync.WaitGroup
		done     atomic.Int32
		underway = make(chan struct{}) // closed once a round's worth of prompts is done
	)
	start := time.Now()
	for i, s := range handles {
		wg.Go(func() {
			for k := range rounds {
				text := fmt.Sprintf("prompt %d of session %d", k, i)
				begun := time.Now()
				res, err := s.Prompt(context.Background(), text)
				if err == nil && res.Text() != answer {
					err = fmt.Errorf("answered %q", res.Text())
				}
				results[i] = append(results[i], outcome{text, err, time.Since(begun)})
				if done.Add(1) == sessions {
					close(underway)
				}
			}
		})
	}
	<-underway // the sessions' prompts now overlap: writes go on all the time
	restartAt := time.Since(start)
	if err := srv.Restart(context.Background(), down); err != nil {
		t.Fatal(err)
	}
	restart := time.Since(start) - restartAt
	wg.Wait()
	total := time.Since(start)

	histories := sessionHistories(t, url)
	var ok, failures, answered int
	var slowest time.Duration
	for i, outs := range results {
		id := fmt.Sprintf("s%03d", i)
		kept := answers(histories[id])
		for _, o := range outs {
			slowest = max(slowest, o.took)
			if o.err != nil {
				failures++
				t.Errorf(failed+"session %s, %q: %v", id, o.text, o.err)
				continue
			}
			ok++
			if kept[o.text] {
				answered++
			} else {
				t.Errorf(failed+"session %s: %q got its answer, which its history does not hold after it", id, o.text)
			}
		}
	}
	logMu.Lock()
	lines := strings.TrimSpace(storeLog.String())
	logMu.Unlock()
	t.Logf("%d prompts (%d sessions × %d) in %s; PostgreSQL restarted at %s in %s; %d succeeded, %d failed; %d answers in the histories; slowest prompt %s",
		sessions*rounds, sessions, rounds, total.Round(time.Millisecond), restartAt.Round(time.Millisecond), restart.Round(time.Millisecond),
		ok, failures, answered, slowest.Round(time.Millisecond))
	t.Logf("the store's log:\n%s", lines)
	if n := strings.Count(lines, "database writes meet a transient error"); n == 0 {
		t.Errorf(failed + "no write met the restart (it came too late to test anything)")
	}
}

// lockedWriter serialises writes to a strings.Builder.
type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// sessionHistories reads every session's history from the database.
func sessionHistories(t *testing.T, url string) map[string][]*messages.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT session_id, entry FROM musepi_entries ORDER BY session_id, seq")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*messages.Entry{}
	var (
		id  string
		raw []byte
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &raw}, func() error {
		e := &messages.Entry{}
		if err := proto.Unmarshal(raw, e); err != nil {
			return errors.Join(fmt.Errorf("session %s", id), err)
		}
		out[id] = append(out[id], e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// answers are the user messages of a history that an assistant message
// answers (stop reason STOP) before the next user message.
func answers(entries []*messages.Entry) map[string]bool {
	out := map[string]bool{}
	prompt := ""
	for _, e := range entries {
		switch {
		case e.GetUser() != nil:
			prompt = e.GetUser().GetText()
		case e.GetAssistant().GetStopReason() == messages.StopReason_STOP_REASON_STOP && prompt != "":
			out[prompt] = true
			prompt = ""
		}
	}
	return out
}
