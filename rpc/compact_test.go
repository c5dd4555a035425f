package rpc

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider"
)

// compact runs the runtime's compaction hook between prompts;
// set_auto_compaction false keeps the hook from running on overflow (the
// prompt ends with compaction_required); without a hook compact fails.
func TestCompact(t *testing.T) {
	var hookCalls atomic.Int32
	keepLast := func(_ context.Context, _ string, entries []musepi.Entry, _ *musepi.AssistantMessage) ([]musepi.Entry, error) {
		hookCalls.Add(1)
		return entries[len(entries)-1:], nil
	}
	overflow := provider.Failure(400, "prompt is too long: 250000 tokens > 200000 maximum", nil)
	scripted := provider.NewScripted(provider.Outcome{Message: provider.Text("one")}, provider.Outcome{Message: provider.Text("two")},
		provider.Outcome{Message: overflow})
	for _, hook := range []bool{true, false} {
		opts := []musepi.Option{musepi.WithProvider("p", scripted)}
		if hook {
			opts = append(opts, musepi.WithCompactionHook(keepLast))
		}
		rt, err := musepi.NewRuntime(opts...)
		if err != nil {
			t.Fatal(err)
		}
		out := &syncBuffer{}
		s := &Server{Runtime: rt, SessionOptions: []musepi.SessionOption{musepi.WithModel("p/m")}, Out: out, Log: slog.New(slog.DiscardHandler)}
		cmds := []string{
			`{"id":"1","type":"prompt","message":"a"}`,
			`{"id":"2","type":"prompt","message":"b","streamingBehavior":"followUp"}`,
			`{"id":"3","type":"compact"}`,
			`{"id":"4","type":"get_messages"}`,
			`{"id":"5","type":"set_auto_compaction","enabled":false}`,
			`{"id":"6","type":"get_state"}`,
			`{"id":"7","type":"prompt","message":"c"}`,
		}
		r, w := io.Pipe()
		done := make(chan error, 1)
		go func() { done <- s.Serve(context.Background(), r) }()
		send := func(line string) { _, _ = w.Write([]byte(line + "\n")) }
		send(cmds[0])
		send(cmds[1])
		waitFor(t, out, func(obj map[string]any) bool {
			return obj["type"] == "agent_settled" && obj["generation"] == float64(2)
		})
		for _, c := range cmds[2:] {
			send(c)
		}
		waitFor(t, out, func(obj map[string]any) bool {
			return obj["type"] == "agent_settled" && obj["generation"] == float64(3)
		})
		w.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		resp := responses(t, out)
		if hook {
			if resp["3"]["success"] != true || !strings.Contains(resp["3"]["data"].(map[string]any)["summary"].(string), "kept 1 of 4") {
				t.Errorf("compact = %v", resp["3"])
			}
			if msgs := resp["4"]["data"].(map[string]any)["messages"].([]any); len(msgs) != 1 {
				t.Errorf("after compact, %d messages, want 1", len(msgs))
			}
		} else if resp["3"]["success"] != false || !strings.Contains(resp["3"]["error"].(string), "no compaction hook") {
			t.Errorf("compact without a hook = %v", resp["3"])
		}
		if st := resp["6"]["data"].(map[string]any); st["autoCompactionEnabled"] != false {
			t.Errorf("autoCompactionEnabled = %v after set_auto_compaction false", st["autoCompactionEnabled"])
		}
		if !strings.Contains(strings.Join(out.lines(), "\n"), `"type":"compaction_required"`) {
			t.Error("an overflow with auto-compaction off emits compaction_required")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = rt.Shutdown(ctx)
		cancel()
	}
	if hookCalls.Load() != 1 {
		t.Errorf("hook ran %d times, want once (the manual compact; auto-compaction was off)", hookCalls.Load())
	}
}

// responses are the response lines by id.
func responses(t *testing.T, out *syncBuffer) map[string]map[string]any {
	t.Helper()
	byID := map[string]map[string]any{}
	for _, l := range out.lines() {
		var obj map[string]any
		if err := json.Unmarshal([]byte(l), &obj); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if id, ok := obj["id"].(string); ok && obj["type"] == "response" {
			byID[id] = obj
		}
	}
	return byID
}

// waitFor waits up to 10 s for a line matching ok.
func waitFor(t *testing.T, out *syncBuffer, ok func(map[string]any) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range out.lines() {
			var obj map[string]any
			if json.Unmarshal([]byte(l), &obj) == nil && ok(obj) {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no matching line in:\n%s", strings.Join(out.lines(), "\n"))
}
