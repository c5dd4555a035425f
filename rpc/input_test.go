package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider"
)

// serve runs s on lines and returns every output line decoded.
func serve(t *testing.T, s *Server, out *syncBuffer, lines ...string) []map[string]any {
	t.Helper()
	if err := s.Serve(context.Background(), strings.NewReader(strings.Join(lines, "\n"))); err != nil {
		t.Fatal(err)
	}
	var objs []map[string]any
	for _, line := range out.lines() {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		objs = append(objs, obj)
	}
	return objs
}

// ofType keeps the lines of one type.
func ofType(objs []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, o := range objs {
		if o["type"] == typ {
			out = append(out, o)
		}
	}
	return out
}

// Command keys are matched exactly, as the protocol spells them: Go's case
// folding would otherwise accept "TYPE" and pick one of "Message" and
// "message". Ids must be printable.
func TestCommandKeysExact(t *testing.T) {
	tests := []struct {
		line string
		id   any // the response's id (nil: none)
		want string
	}{
		{`{"TYPE":"get_state","id":"1"}`, "1", `unknown key "TYPE" (keys are case-sensitive: did you mean "type"?)`},
		{`{"id":"2","type":"prompt","Message":"a","message":"b"}`, "2", `unknown key "Message" (keys are case-sensitive: did you mean "message"?)`},
		{`{"id":"2b","type":"prompt","message":"a","Message":"b"}`, "2b", `duplicate key "Message" (also "message"; keys are case-sensitive)`},
		{`{"id":"3","type":"prompt","message":"a","message":"b"}`, "3", `duplicate key "message" (also "message"`},
		{`{"ID":"4","type":"get_state"}`, nil, `unknown key "ID"`},
		{`{"id":"5","type":"set_model","provider":"p","modelID":"m"}`, "5", `did you mean "modelId"?`},
		{`{"id":"6","type":"get_state","Id":"7"}`, "6", `duplicate key "Id"`},
		{`{"id":"a\u0000b","type":"get_state"}`, "a\x00b", `id "a\x00b": control character U+0000`},
		{`{"id":"line\nbreak","type":"get_state"}`, "line\nbreak", `control character U+000A`},
		{`{"id":"8","type":"set_model","provider":"p","modelId":"m\u0000"}`, "8", `control character U+0000`},
		{`{"id":"9","type":"get_state","extra":{"TYPE":1}}`, "9", ""}, // nested keys are not commands' keys
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			out := &syncBuffer{}
			objs := serve(t, newServer(t, out), out, tt.line)
			r := ofType(objs, "response")
			if len(r) != 1 || r[0]["id"] != tt.id {
				t.Fatalf("responses %v, want one with id %v", r, tt.id)
			}
			if tt.want == "" {
				if r[0]["success"] != true {
					t.Fatalf("response %v, want success", r[0])
				}
				return
			}
			if r[0]["success"] != false || !strings.Contains(fmt.Sprint(r[0]["error"]), tt.want) {
				t.Fatalf("response %v, want an error containing %q", r[0], tt.want)
			}
		})
	}
}

// A prompt over the prompt limit is rejected in its response, which has
// its id and says the limit, also when invalid UTF-8 replaced by U+FFFD
// made it grow past the limit; an over-long line's error has the id its
// prefix holds. None of them starts a prompt, and the next prompt runs.
func TestOversizedInput(t *testing.T) {
	out := &syncBuffer{}
	s := newServer(t, out)
	rt, err := musepi.NewRuntime(musepi.WithLimits(musepi.Limits{PromptBytes: 64}),
		musepi.WithProvider("p", provider.NewScripted(provider.Outcome{Message: provider.Text("ok")})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Shutdown(context.Background()) })
	s.Runtime, s.MaxLine = rt, 1024
	invalid := strings.Repeat("\xff", 40) // 40 bytes in the line, 120 once decoded
	objs := serve(t, s, out,
		`{"id":"big","type":"prompt","message":"`+strings.Repeat("x", 65)+`"}`,
		`{"id":"bad-utf8","type":"prompt","message":"`+invalid+`"}`,
		`{"id":"long","type":"prompt","message":"`+strings.Repeat("x", 2000)+`"}`,
		`{"type":"prompt","message":"`+strings.Repeat("x", 5000)+`","id":"late"}`,
		`{"id":"ok","type":"prompt","message":"fits"}`,
	)
	want := []struct {
		id   any
		want string
	}{
		{"big", "prompt of 65 bytes rejected: musepi: limit exceeded: at most 64 prompt bytes"},
		{"bad-utf8", "prompt of 120 bytes rejected"},
		{"long", "line longer than 1024 bytes"},
		{nil, "line longer than 1024 bytes"}, // the id is past the kept prefix
		{"ok", ""},
	}
	r := ofType(objs, "response")
	if len(r) != len(want) {
		t.Fatalf("responses %v", r)
	}
	for i, w := range want {
		if r[i]["id"] != w.id || (w.want == "") != (r[i]["success"] == true) || !strings.Contains(fmt.Sprint(r[i]["error"]), w.want) {
			t.Errorf("response %d = %v, want id %v and %q", i, r[i], w.id, w.want)
		}
		if w.id != nil && r[i]["command"] != "prompt" {
			t.Errorf("response %d = %v, want command prompt", i, r[i])
		}
	}
	if settled := ofType(objs, "agent_settled"); len(settled) != 1 || settled[0]["success"] != true {
		t.Fatalf("agent_settled %v, want one success (only the prompt that fits ran)", settled)
	}
}

// failingWriter fails every write after the first n with EPIPE, as stdout
// does once the client closed its end of the pipe.
type failingWriter struct {
	mu     sync.Mutex
	n      int
	writes int
}

func (w *failingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	if w.writes > w.n {
		return 0, &os.PathError{Op: "write", Path: "/dev/stdout", Err: syscall.EPIPE}
	}
	return len(p), nil
}

// A client that closes the output pipe ends serving: the endless prompt is
// aborted, the session closed with its history on disk, and Serve returns
// the EPIPE error, while stdin is still open.
func TestClosedOutputStopsServing(t *testing.T) {
	dir := t.TempDir()
	rt, err := musepi.NewRuntime(musepi.WithHistoryDir(dir),
		musepi.WithProvider("p", provider.NewScripted(provider.Outcome{Block: true})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Shutdown(context.Background()) })
	var logs syncBuffer
	s := &Server{Runtime: rt, Out: &failingWriter{n: 1}, Log: slog.New(zerolog.NewSlogHandler(zerolog.New(&logs))),
		SessionOptions: []musepi.SessionOption{musepi.WithModel("p/m"), musepi.WithSessionID("piped")}}
	in, feed := io.Pipe()
	defer in.Close()
	go func() {
		_, _ = io.WriteString(feed, `{"id":"1","type":"prompt","message":"keep me"}`+"\n"+`{"id":"2","type":"get_state"}`+"\n")
	}()
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), in) }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not end after its output failed")
	}
	if !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Serve = %v, want EPIPE", err)
	}
	if log := strings.Join(logs.lines(), "\n"); !strings.Contains(log, "cannot write to the client") || strings.Count(log, `"level":"error"`) != 1 {
		t.Errorf("log %q, want the failure logged once", log)
	}
	entries, err := os.ReadFile(filepath.Join(dir, "piped.jsonl"))
	if err != nil || !strings.Contains(string(entries), "keep me") {
		t.Fatalf("history after the pipe closed: %q, %v", entries, err)
	}
}

// A prompt acknowledged but refused by the runtime before the session took
// it (here: another session holds the only in-flight slot) still ends with
// an agent_settled line that says why.
func TestPromptRefusedByRuntimeSettles(t *testing.T) {
	p := provider.NewScripted(provider.Outcome{Block: true})
	rt, err := musepi.NewRuntime(musepi.WithLimits(musepi.Limits{PromptsInFlight: 1}), musepi.WithProvider("p", p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Shutdown(context.Background()) })
	other, err := rt.NewSession(context.Background(), musepi.WithModel("p/m"))
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	other.PromptAsync(context.Background(), "holds the slot", func(_ *musepi.AssistantMessage, err error) { held <- err })
	defer func() { other.Abort(); <-held }()

	out := &syncBuffer{}
	s := &Server{Runtime: rt, SessionOptions: []musepi.SessionOption{musepi.WithModel("p/m")}, Out: out, Log: slog.New(slog.DiscardHandler)}
	objs := serve(t, s, out, `{"id":"1","type":"prompt","message":"hi"}`)
	settled := ofType(objs, "agent_settled")
	if len(settled) != 1 || settled[0]["success"] != false || !strings.Contains(fmt.Sprint(settled[0]["error"]), "at most 1 prompts in flight") {
		t.Fatalf("agent_settled %v, want one failure naming the limit; all lines %v", settled, objs)
	}
}
