package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/musepi/musepi/provider/fakellm"
)

// rpcProc is a running "musepi rpc" driven through its stdin and stdout.
type rpcProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan map[string]any
	seen  []map[string]any // every line read, in order
	// held are the lines read while waiting for a response that next has
	// not yet passed: the events of a prompt can come before its response.
	held []map[string]any

	stopOnce sync.Once
	stopErr  error
}

// startRPC starts musepi rpc against a fakellm server playing scenario.
func startRPC(t *testing.T, bin, scenario string, extra ...string) *rpcProc {
	t.Helper()
	base := startFake(t, scenario)
	return spawnRPC(t, bin, append([]string{"--provider", "openai", "--base-url", base + "/v1", "--model", "m1"}, extra...)...)
}

// startFake starts a fakellm server playing scenario, closed when the test
// ends, and returns its base URL.
func startFake(t *testing.T, scenario string) string {
	t.Helper()
	sc, err := fakellm.ParseScenario([]byte(scenario))
	if err != nil {
		t.Fatal(err)
	}
	srv := fakellm.New(sc)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return base
}

// spawnRPC starts "musepi rpc args..." with OPENAI_API_KEY set.
func spawnRPC(t *testing.T, bin string, args ...string) *rpcProc {
	t.Helper()
	return spawnRPCStderr(t, bin, io.Discard, args...)
}

// spawnRPCStderr is spawnRPC writing the process's stderr to errOut, which
// may be read once stop has returned.
func spawnRPCStderr(t *testing.T, bin string, errOut io.Writer, args ...string) *rpcProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"rpc"}, args...)...)
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=key-a")
	cmd.Stderr = errOut
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &rpcProc{t: t, cmd: cmd, in: in, lines: make(chan map[string]any, 1000)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 0, 1<<20), 1<<22)
		for sc.Scan() {
			var obj map[string]any
			if err := json.Unmarshal(sc.Bytes(), &obj); err != nil {
				obj = map[string]any{"type": "NOT-JSON", "line": sc.Text()}
			}
			p.lines <- obj
		}
	}()
	t.Cleanup(func() { _ = p.stop() })
	return p
}

// stop closes stdin and waits for the process to exit (killing it after
// 15 s); only the first call waits, later ones return its result.
func (p *rpcProc) stop() error {
	p.stopOnce.Do(func() {
		_ = p.in.Close()
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case p.stopErr = <-done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			p.stopErr = fmt.Errorf("killed after 15 s: %v", <-done)
		}
		for range p.lines {
		}
	})
	return p.stopErr
}

func (p *rpcProc) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		p.t.Fatal(err)
	}
}

// next returns the next line whose type is typ (other lines are kept in seen).
func (p *rpcProc) next(typ string, within time.Duration) map[string]any {
	p.t.Helper()
	for i, obj := range p.held {
		if obj["type"] == typ {
			p.held = p.held[i+1:]
			return obj
		}
	}
	p.held = nil
	deadline := time.After(within)
	for {
		if obj := p.read(typ, deadline); obj["type"] == typ {
			return obj
		}
	}
}

// read returns the next line, or fails the test once deadline passes while
// waiting for what.
func (p *rpcProc) read(what string, deadline <-chan time.Time) map[string]any {
	p.t.Helper()
	select {
	case obj, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("stdout closed while waiting for %q; seen %v", what, p.types())
		}
		p.seen = append(p.seen, obj)
		if obj["type"] == "NOT-JSON" {
			p.t.Fatalf("stdout carried a non-protocol line: %v", obj["line"])
		}
		return obj
	case <-deadline:
		p.t.Fatalf("no %q within the time allowed; seen %v", what, p.types())
	}
	return nil
}

// nextAssistant returns the message of the next message_end of an
// assistant message.
func (p *rpcProc) nextAssistant(within time.Duration) map[string]any {
	p.t.Helper()
	for {
		msg, _ := p.next("message_end", within)["message"].(map[string]any)
		if msg["role"] == "assistant" {
			return msg
		}
	}
}

// response waits for the response to the command with id; the lines read
// before it stay for next.
func (p *rpcProc) response(id string) map[string]any {
	p.t.Helper()
	for i, obj := range p.held {
		if obj["type"] == "response" && obj["id"] == id {
			p.held = slices.Delete(p.held, i, i+1)
			return obj
		}
	}
	deadline := time.After(10 * time.Second)
	for {
		obj := p.read("response "+id, deadline)
		if obj["type"] == "response" && obj["id"] == id {
			return obj
		}
		p.held = append(p.held, obj)
	}
}

func (p *rpcProc) types() []string {
	var out []string
	for _, o := range p.seen {
		out = append(out, fmt.Sprint(o["type"]))
	}
	return out
}

// linesSince lists, one per line, the lines seen from the response to
// the request with this id on (message_update lines left out).
func (p *rpcProc) linesSince(id string) string {
	var b strings.Builder
	from := len(p.seen)
	for i, o := range p.seen {
		if o["type"] == "response" && o["id"] == id {
			from = i
			break
		}
	}
	for _, o := range p.seen[from:] {
		if o["type"] != "message_update" {
			fmt.Fprintf(&b, "  %v\n", o)
		}
	}
	return b.String()
}

// retryTrace lists the retry events seen, in order.
func (p *rpcProc) retryTrace() []string {
	var out []string
	for _, o := range p.seen {
		switch o["type"] {
		case "auto_retry_start":
			out = append(out, fmt.Sprintf("start %v delay=%v", o["attempt"], o["delayMs"]))
		case "auto_retry_end":
			out = append(out, fmt.Sprintf("end success=%v attempt=%v", o["success"], o["attempt"]))
		case "agent_end":
			out = append(out, fmt.Sprintf("agent_end willRetry=%v", o["willRetry"]))
		case "agent_settled":
			out = append(out, fmt.Sprintf("settled success=%v", o["success"]))
		}
	}
	return out
}

func expectTrace(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("retry events:\n got  %q\n want %q", got, want)
	}
}

func TestRPC(t *testing.T) {
	t.Parallel() // mostly waiting on processes
	bin := buildCommand(t)

	t.Run("a prompt rides out a 429 and streams the retry events in order", func(t *testing.T) {
		p := startRPC(t, bin, `{"rules":[{"match":{"first":1},"respond":{"preset":"rate_limit","headers":{"retry-after":"1"}}}],
			"default":{"text":"fine now"}}`)
		p.send(`{"id":"1","type":"prompt","message":"hi"}`)
		if r := p.response("1"); r["success"] != true || r["command"] != "prompt" {
			t.Fatalf("prompt response %v", r)
		}
		start := p.next("auto_retry_start", 10*time.Second)
		if start["errorClass"] != "transient" || start["delayMs"] != float64(1000) || start["maxAttempts"] != float64(10) {
			t.Fatalf("auto_retry_start %v", start)
		}
		p.next("agent_settled", 15*time.Second)
		expectTrace(t, p.retryTrace(),
			"agent_end willRetry=true", "start 1 delay=1000", "agent_end willRetry=false",
			"end success=true attempt=1", "settled success=true")
	})

	// Spec 3, "What resets the counter": the tool-use message in the middle
	// of the loop closes the first chain, so the second 503 starts a new
	// chain at attempt 1.
	t.Run("503, tool call, 503, answer: two chains of one attempt", func(t *testing.T) {
		p := startRPC(t, bin, `{"rules":[
			{"name":"first-503","match":{"first":1},"respond":{"preset":"unavailable"}},
			{"name":"tool","match":{"first":1},"respond":{"tool_call":{"name":"read_file","arguments":{"path":"a.txt"}}}},
			{"name":"second-503","match":{"first":1},"respond":{"preset":"unavailable"}}],
			"default":{"text":"all done"}}`)
		p.send(`{"id":"1","type":"prompt","message":"read a.txt"}`)
		if r := p.response("1"); r["success"] != true {
			t.Fatalf("prompt response %v", r)
		}
		p.next("agent_settled", 15*time.Second)
		trace := p.retryTrace()
		for i, line := range trace {
			trace[i], _, _ = strings.Cut(line, " delay=") // jittered
		}
		expectTrace(t, trace,
			"agent_end willRetry=true", "start 1", "end success=true attempt=1",
			"agent_end willRetry=true", "start 1", "agent_end willRetry=false",
			"end success=true attempt=1", "settled success=true")
	})

	// Issue 25 item 2: a refused turn keeps the provider's words. The
	// assistant message's errorMessage, auto_retry_start's errorMessage and
	// auto_retry_end's finalError are the error text sent with the refusal,
	// verbatim; its category and explanation stay in stopDetails.
	t.Run("a refused turn keeps the provider's words", func(t *testing.T) {
		errText := func(model string) string { return "Refusal (cyber): Classifier declined the turn of " + model + "." }
		explanation := func(model string) string { return "Classifier declined the turn of " + model + "." }
		rule := func(model string) string {
			return fmt.Sprintf(`{"match":{"model":%q},"respond":{"refusal":"I can't help with that.","stop_error":%q,`+
				`"stop_details":{"type":"refusal","category":"cyber","explanation":%q}}}`, model, errText(model), explanation(model))
		}
		scenario := `{"rules":[` + rule("m1") + `,` + rule("m2") + `]}`
		// refused reads the next assistant message: model's refusal, in its words.
		refused := func(t *testing.T, p *rpcProc, model string) {
			t.Helper()
			msg := p.nextAssistant(10 * time.Second)
			details := map[string]any{"type": "refusal", "fields": map[string]any{"category": "cyber", "explanation": explanation(model)}}
			if msg["model"] != model || msg["stopReason"] != "error" || msg["errorMessage"] != errText(model) || !reflect.DeepEqual(msg["stopDetails"], details) {
				t.Fatalf("assistant message %v\nwant %s's refusal, errorMessage %q, stopDetails %v", msg, model, errText(model), details)
			}
		}
		settled := func(t *testing.T, p *rpcProc, model string) {
			t.Helper()
			if s := p.next("agent_settled", 10*time.Second); s["success"] != false || s["error"] != errText(model) {
				t.Fatalf("agent_settled %v, want a failure with error %q", s, errText(model))
			}
		}

		t.Run("no fallback model", func(t *testing.T) {
			p := startRPC(t, bin, scenario)
			p.send(`{"id":"1","type":"prompt","message":"something risky"}`)
			refused(t, p, "m1")
			settled(t, p, "m1")
			expectTrace(t, p.retryTrace(), "agent_end willRetry=false", "settled success=false")
		})

		t.Run("a fallback model that refuses too", func(t *testing.T) {
			config := filepath.Join(t.TempDir(), "musepi.toml")
			writeFile(t, config, fmt.Sprintf(`default_model = "fake/m1"
[providers.fake]
kind = "openai"
base_url = "%s/v1"
models = ["m1", "m2"]
credentials = [{ name = "main", api_key_env = "OPENAI_API_KEY" }]
[retry.fallback_chains]
default = ["fake/m2"]
`, startFake(t, scenario)))
			p := spawnRPC(t, bin, "--config", config)
			p.send(`{"id":"1","type":"prompt","message":"something risky"}`)
			refused(t, p, "m1")
			if start := p.next("auto_retry_start", 10*time.Second); start["errorMessage"] != errText("m1") || start["errorClass"] != "classifier_refusal" {
				t.Fatalf("auto_retry_start %v, want errorMessage %q", start, errText("m1"))
			}
			refused(t, p, "m2")
			if end := p.next("auto_retry_end", 10*time.Second); end["success"] != false || end["finalError"] != errText("m2") {
				t.Fatalf("auto_retry_end %v, want finalError %q", end, errText("m2"))
			}
			settled(t, p, "m2")
			expectTrace(t, p.retryTrace(),
				"agent_end willRetry=true", "start 1 delay=0", "agent_end willRetry=false",
				"end success=false attempt=1", "settled success=false")
		})
	})

	t.Run("abort_retry during the backoff", func(t *testing.T) {
		p := startRPC(t, bin, `{"rules":[{"respond":{"preset":"rate_limit","headers":{"retry-after":"30"}}}]}`)
		p.send(`{"id":"1","type":"prompt","message":"hi"}`)
		p.next("auto_retry_start", 10*time.Second)
		p.send(`{"id":"2","type":"get_state"}`)
		state := p.response("2")["data"].(map[string]any)
		if state["isRetrying"] != true || state["autoRetryEnabled"] != true {
			t.Fatalf("get_state while retrying: %v", state)
		}
		p.send(`{"id":"3","type":"abort_retry"}`)
		if r := p.response("3"); r["success"] != true {
			t.Fatalf("abort_retry response %v", r)
		}
		end := p.next("auto_retry_end", 5*time.Second)
		if end["success"] != false || end["finalError"] != "Retry cancelled" {
			t.Fatalf("auto_retry_end %v", end)
		}
		settled := p.next("agent_settled", 5*time.Second)
		if settled["success"] != false {
			t.Fatalf("agent_settled %v", settled)
		}
	})

	t.Run("set_auto_retry false: the failure is final", func(t *testing.T) {
		p := startRPC(t, bin, `{"rules":[{"respond":{"preset":"unavailable"}}]}`)
		p.send(`{"id":"1","type":"set_auto_retry","enabled":false}`)
		p.response("1")
		p.send(`{"id":"2","type":"get_state"}`)
		if state := p.response("2")["data"].(map[string]any); state["autoRetryEnabled"] != false {
			t.Fatalf("get_state: %v", state)
		}
		p.send(`{"id":"3","type":"prompt","message":"hi"}`)
		p.next("agent_settled", 10*time.Second)
		expectTrace(t, p.retryTrace(), "agent_end willRetry=false", "settled success=false")
	})

	t.Run("SIGTERM cancels the backoff, settles the prompt, and the history survives", func(t *testing.T) {
		dir := t.TempDir()
		scenario := `{"rules":[{"respond":{"preset":"rate_limit","headers":{"retry-after":"30"}}}]}`
		p := startRPC(t, bin, scenario, "--history-dir", dir, "--session-id", "kept")
		p.send(`{"id":"1","type":"prompt","message":"remember me"}`)
		p.next("auto_retry_start", 10*time.Second)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		end := p.next("auto_retry_end", 10*time.Second)
		if end["success"] != false {
			t.Fatalf("auto_retry_end %v", end)
		}
		p.next("agent_settled", 10*time.Second)
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
		again := startRPC(t, bin, scenario, "--history-dir", dir, "--session-id", "kept")
		again.send(`{"id":"m","type":"get_messages"}`)
		msgs := again.response("m")["data"].(map[string]any)["messages"].([]any)
		if len(msgs) != 1 || msgs[0].(map[string]any)["content"] != "remember me" {
			t.Fatalf("messages after restart: %v", msgs)
		}
	})

	t.Run("bad input gets an error response while a prompt in flight completes", func(t *testing.T) {
		p := startRPC(t, bin, `{"rules":[{"match":{"first":1},"respond":{"preset":"overloaded"}}],"default":{"text":"done"}}`,
			"--max-line", "4096")
		p.send(`{"id":"p","type":"prompt","message":"hi"}`)
		p.response("p")
		bad := []struct{ line, id, want string }{
			{`{"id":"a","type":"prompt"`, "a", "malformed command"},
			{`{"id":"b","type":"teleport"}`, "b", `unknown command "teleport"`},
			{`{"id":"c","type":"set_auto_retry"}`, "c", `missing field "enabled"`},
			{`{"id":"d","type":"set_auto_retry","enabled":"no"}`, "d", `field "enabled": want bool`},
			{`{"id":"e","type":"set_model","provider":"openai"}`, "e", `missing field "modelId"`},
			{`{"id":"f","type":"prompt","message":"again"}`, "f", "already running"},
			{`{"id":"g"}`, "g", `missing "type"`},
			{`{"id":"h","type":"prompt","message":"` + strings.Repeat("x", 5000) + `"}`, "h", "line longer than 4096 bytes"},
			{`{"type":"prompt","message":"` + strings.Repeat("x", 5000) + `","id":"i"}`, "", "line longer than 4096 bytes"},
			{`{"id":"j","TYPE":"get_state"}`, "j", `unknown key "TYPE"`},
		}
		for _, b := range bad {
			p.send(b.line)
			var r map[string]any
			for {
				r = p.next("response", 10*time.Second)
				if b.id == "" && r["id"] == nil || r["id"] == b.id {
					break
				}
			}
			if r["success"] != false || !strings.Contains(fmt.Sprint(r["error"]), b.want) {
				t.Errorf("%s: response %v, want an error containing %q", b.line[:min(len(b.line), 60)], r, b.want)
			}
		}
		settled := p.next("agent_settled", 15*time.Second)
		if settled["success"] != true {
			t.Fatalf("the prompt in flight did not complete: %v", settled)
		}
		p.send(`{"id":"m","type":"get_messages"}`)
		msgs := p.response("m")["data"].(map[string]any)["messages"].([]any)
		if len(msgs) != 2 {
			t.Fatalf("get_messages: %v (the retried error must be stripped)", msgs)
		}
	})
}
