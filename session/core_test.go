package session

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
	"google.golang.org/protobuf/proto"
)

// The golden scripts in testdata/ drive a Core with inputs (lines starting
// with "> ") and list the effects each input returns, one per line. They
// read next to docs/retry-policy.md: one file per behaviour of the spec.
// `go test ./session -rewrite` writes the effects the core returns now.
var rewrite = flag.Bool("rewrite", false, "rewrite the expected effects of testdata/*.txt")

// nominal is a jitter source giving the nominal (un-jittered) delays.
type nominal struct{}

func (nominal) Float64() float64 { return 1 }

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got := runScript(t, string(raw))
			if *rewrite {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != string(raw) {
				t.Errorf("%s: effects differ (run with -rewrite after a deliberate change)\n%s", file, diff(string(raw), got))
			}
		})
	}
}

// Every script gives the same effects when, after each input that leaves
// the core at rest (idle, or in a backoff), it goes on with a core resumed
// from its Record, encoded to protobuf bytes and back: the record holds
// all a waiting session needs.
func TestScriptsResumedAtRest(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	total := 0
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got, n := runScriptResuming(t, string(raw), true)
			if got != string(raw) {
				t.Errorf("%s: effects differ once resumed from records\n%s", file, diff(string(raw), got))
			}
			total += n
		})
	}
	if total < len(files) {
		t.Errorf("resumed %d times over %d scripts", total, len(files))
	}
}

// script is a Core under test and what the script said so far.
type script struct {
	t     *testing.T
	core  *Core
	cfg   Config
	now   time.Time
	token uint64 // of the last timer or ask
	turn  uint64 // of the last turn started
	buf   Effects
	// resume: after each input that leaves the core at rest, go on with a
	// core resumed from its Record (TestScriptsResumedAtRest).
	resume  bool
	resumed int // how often
}

// runScript runs the inputs of a script and returns it with the effects
// each input returned in place of the expected ones.
func runScript(t *testing.T, text string) string {
	out, _ := runScriptResuming(t, text, false)
	return out
}

// runScriptResuming is runScript that, with resume, goes on after each
// input that leaves the core at rest with a core resumed from its record;
// it also says how often it did.
func runScriptResuming(t *testing.T, text string, resume bool) (string, int) {
	sc := &script{t: t, now: t0, cfg: Config{Model: "fake/m1", Role: "default", Settings: retry.DefaultSettings()}, resume: resume}
	// Model fallback is off unless a script sets it; the default role has a
	// chain (to fake/m2) unless a script sets fallbackChains=none.
	sc.cfg.Settings.ModelFallback = false
	sc.cfg.Settings.FallbackChains = map[string][]string{"default": {"fake/m2"}}
	// The provider fake has credentials unless a script sets credentials=none.
	sc.cfg.Credentialed = map[string]bool{"fake": true}
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "> "):
			out.WriteString(line + "\n")
			for _, e := range sc.input(strings.TrimPrefix(line, "> ")) {
				out.WriteString(e + "\n")
			}
		case strings.HasPrefix(line, "#"), line == "":
			out.WriteString(line + "\n")
		}
	}
	return out.String(), sc.resumed
}

// input runs one command and renders the effects.
func (sc *script) input(line string) []string {
	sc.t.Helper()
	cmd, arg, _ := strings.Cut(line, " ")
	args := strings.Fields(arg)
	var in Input
	switch cmd {
	case "set": // settings and config, before the first prompt: key=value ...
		for _, kv := range args {
			sc.set(kv)
		}
		return nil
	case "advance":
		d, err := time.ParseDuration(arg)
		if err != nil {
			sc.t.Fatalf("advance %q: %v", arg, err)
		}
		sc.now = sc.now.Add(d)
		return nil
	case "prompt": // recorded by the owner
		in = Input{Kind: InPrompt}
	case "prompt-unrecorded": // the owner could not record it
		in = Input{Kind: InPrompt, Err: arg}
	case "credential":
		in = Input{Kind: InCredentialSelected, Credential: arg}
	case "delta":
		kind, text, _ := strings.Cut(arg, " ")
		in = Input{Kind: InTurnDelta, Turn: sc.turn, DeltaKind: kind, Delta: text}
	case "turn-end":
		in = Input{Kind: InTurnEnded, Turn: sc.turn, Message: sc.message(args)}
	case "turn-end-unrecorded": // the owner could not record the message: "KIND ... | ERROR"
		kind, errText, _ := strings.Cut(arg, " | ")
		in = Input{Kind: InTurnEnded, Turn: sc.turn, Message: sc.message(strings.Fields(kind)), Err: errText}
	case "tools-done":
		in = Input{Kind: InToolsDone, Turn: sc.turn}
	case "backoff-done": // [key-free]: the key held is free in the node's view
		in = Input{Kind: InBackoffDone, Token: sc.token, Generation: sc.core.Generation(), KeyFree: arg == "key-free"}
	case "timer-lost":
		in = Input{Kind: InTimerLost}
	case "abort":
		in = Input{Kind: InAbort}
	case "abort-retry":
		in = Input{Kind: InAbortRetry}
	case "edit-guard-abort":
		in = Input{Kind: InEditGuardAbort}
	case "set-auto-retry":
		in = Input{Kind: InSetAutoRetry, Enabled: arg == "true"}
	case "set-model":
		in = Input{Kind: InSetModel, Model: arg}
	case "credential-reply": // "switched KEY" | "none [retry-at=+20s]"
		in = Input{Kind: InCredentialReply, Token: sc.token}
		if len(args) > 0 && args[0] == "switched" {
			in.Switched, in.Credential = true, args[1]
		}
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "retry-at="); ok {
				in.RetryAt = sc.at(v)
			}
		}
	case "fallback-reply": // "FROM TO [until=+60s]" | "none"
		in = Input{Kind: InFallbackReply, Token: sc.token, Role: sc.cfg.Role}
		if len(args) >= 2 {
			in.Switched, in.From, in.To = true, args[0], args[1]
		}
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "until="); ok {
				in.CooldownUntil = sc.at(v)
			}
		}
	case "budget-grant":
		in = Input{Kind: InBudgetGrant, Token: sc.token, At: sc.at(arg)}
	case "compaction-done":
		in = Input{Kind: InCompactionDone, Generation: sc.core.Generation()}
		if arg != "ok" {
			in.Err = arg
		}
	case "stop":
		in = Input{Kind: InStop}
	case "history-failed":
		in = Input{Kind: InHistoryFailed, Err: arg}
	case "history-failed-revert":
		in = Input{Kind: InHistoryFailed, Err: arg, RevertModel: true}
	default:
		sc.t.Fatalf("unknown command %q", line)
	}
	if sc.core == nil {
		sc.core = New(sc.cfg, nominal{})
	}
	sc.buf.Reset()
	sc.core.Step(&sc.buf, sc.now, in)
	effects := sc.buf.List()
	out := make([]string, 0, len(effects)+1)
	for i := range effects {
		out = append(out, sc.render(&effects[i]))
	}
	out = append(out, "state "+sc.core.State().String())
	if st := sc.core.State(); sc.resume && (st == Idle || st == Backoff) {
		rec, err := sc.core.Record()
		if err != nil {
			sc.t.Fatalf("Record at rest (%s): %v", st, err)
		}
		// Through the protobuf form and its bytes, as a store keeps it.
		b, err := proto.Marshal(rec.Wire())
		if err != nil {
			sc.t.Fatal(err)
		}
		var w messages.SessionRecord
		if err := proto.Unmarshal(b, &w); err != nil {
			sc.t.Fatal(err)
		}
		if rec, err = RecordFromWire(&w); err != nil {
			sc.t.Fatal(err)
		}
		if sc.core, err = Resume(sc.cfg, nominal{}, rec); err != nil {
			sc.t.Fatalf("Resume: %v", err)
		}
		sc.resumed++
	}
	return out
}

func (sc *script) set(kv string) {
	k, v, _ := strings.Cut(kv, "=")
	s := &sc.cfg.Settings
	switch k {
	case "model":
		sc.cfg.Model = v
	case "compaction":
		sc.cfg.Compaction = v == "true"
	case "enabled":
		s.Enabled = v == "true"
	case "modelFallback":
		s.ModelFallback = v == "true"
	case "fallbackChains": // none | role:model,model
		s.FallbackChains = nil
		if role, models, ok := strings.Cut(v, ":"); ok {
			s.FallbackChains = map[string][]string{role: strings.Split(models, ",")}
		}
	case "credentials": // none | provider,provider
		sc.cfg.Credentialed = nil
		if v != "none" {
			sc.cfg.Credentialed = map[string]bool{}
			for _, p := range strings.Split(v, ",") {
				sc.cfg.Credentialed[p] = true
			}
		}
	case "maxRetries":
		s.MaxRetries, _ = strconv.Atoi(v)
	case "budget":
		s.Budget.Enabled = v == "true"
	case "maxDelay":
		s.MaxDelay, _ = time.ParseDuration(v)
	default:
		sc.t.Fatalf("unknown setting %q", kv)
	}
}

// at reads "+20s" as an instant after the script's now.
func (sc *script) at(v string) time.Time {
	d, err := time.ParseDuration(strings.TrimPrefix(v, "+"))
	if err != nil {
		sc.t.Fatalf("instant %q: %v", v, err)
	}
	return sc.now.Add(d)
}

// message builds a turn's message: "stop TEXT", "tool-use NAME",
// "error STATUS TEXT...", "refusal TEXT...", "aborted".
func (sc *script) message(args []string) *messages.AssistantMessage {
	if len(args) == 0 {
		sc.t.Fatal("turn-end needs a kind")
	}
	rest := strings.Join(args[1:], " ")
	switch args[0] {
	case "stop":
		return &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_STOP,
			Content: []*messages.ContentBlock{{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: rest}}}}}
	case "tool-use":
		return &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_TOOL_USE,
			Content: []*messages.ContentBlock{{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: "call_1", Name: rest}}}}}
	case "error":
		status, _ := strconv.Atoi(args[1])
		return &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ERROR, HttpStatus: int32(status),
			ErrorMessage: strings.Join(args[2:], " ")}
	case "refusal":
		return &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ERROR, ErrorMessage: rest,
			StopDetails: &messages.StopDetails{Type: retry.StopDetailSensitive}}
	case "aborted":
		return &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ABORTED, ErrorMessage: retry.AbortSentinel}
	}
	sc.t.Fatalf("unknown turn-end kind %q", args[0])
	return nil
}

// render writes one effect as a line; it remembers the tokens and turns
// later inputs answer.
func (sc *script) render(e *Effect) string {
	switch e.Kind {
	case Emit:
		return "emit " + renderEvent(e.Event)
	case AppendModelChange:
		return fmt.Sprintf("append-model-change %s -> %s (%s)", e.Change.From, e.Change.To, e.Change.Reason)
	case SelectCredential:
		if e.Credential != "" {
			return fmt.Sprintf("%s %s keep=%s", e.Kind, e.Model, e.Credential)
		}
		return fmt.Sprintf("%s %s", e.Kind, e.Model)
	case ResetProviderSession, DropBudgetHold, ReleaseSession:
		return fmt.Sprintf("%s %s", e.Kind, e.Model)
	case StartTurn:
		sc.turn = e.Turn
		return fmt.Sprintf("start-turn %d %s credential=%s", e.Turn, e.Model, e.Credential)
	case RunTools:
		return fmt.Sprintf("run-tools %d calls=%d", e.Turn, len(e.Calls))
	case ArmTimer:
		sc.token = e.Token
		return fmt.Sprintf("arm-timer %s then continue %s gen=%d", e.Delay, e.ContinueDelay, e.Generation)
	case AskCredentialSwitch:
		sc.token = e.Token
		return fmt.Sprintf("ask-credential-switch %s block=%s", e.Model, e.BlockFor)
	case AskFallback:
		sc.token = e.Token
		return fmt.Sprintf("ask-fallback %s primary=%s role=%s cooldown=%s pin=%t", e.Model, e.Primary, e.Role, e.BlockFor, e.Pin)
	case AskBudget:
		sc.token = e.Token
		return fmt.Sprintf("ask-budget %s due=+%s", e.Model, e.Due.Sub(sc.now))
	case ReportOutcome:
		return fmt.Sprintf("report-outcome %s success=%t", e.Model, e.Success)
	case Compact:
		return "compact gen=" + strconv.FormatUint(e.Generation, 10)
	case Settle, RejectPrompt:
		r := e.Result
		if r.Error == "" {
			return fmt.Sprintf("%s gen=%d ok", e.Kind, r.Generation)
		}
		return fmt.Sprintf("%s gen=%d %s %q", e.Kind, r.Generation, r.ErrorKind, r.Error)
	}
	return e.Kind.String()
}

func renderEvent(ev *Event) string {
	switch ev.Kind {
	case EventAgentStart:
		return fmt.Sprintf("agent_start gen=%d", ev.Generation)
	case EventMessageUpdate:
		return fmt.Sprintf("message_update %s %q", ev.DeltaKind, ev.Delta)
	case EventMessageEnd:
		return "message_end " + ev.Message.GetStopReason().String()
	case EventAgentEnd:
		return fmt.Sprintf("agent_end willRetry=%t", ev.WillRetry)
	case EventAgentSettled:
		if ev.Success {
			return "agent_settled success"
		}
		return fmt.Sprintf("agent_settled error=%q", ev.Error)
	case EventAutoRetryStart:
		return fmt.Sprintf("auto_retry_start %d/%d delay=%s class=%s", ev.Start.Attempt, ev.Start.MaxAttempts, ev.Start.Delay, ev.Start.Class)
	case EventAutoRetryEnd:
		s := fmt.Sprintf("auto_retry_end success=%t attempt=%d", ev.End.Success, ev.End.Attempt)
		if ev.End.FinalError != "" {
			s += fmt.Sprintf(" error=%q", ev.End.FinalError)
		}
		return s
	case EventFallbackApplied:
		return fmt.Sprintf("retry_fallback_applied %s -> %s (%s)", ev.Fallback.From, ev.Fallback.To, ev.Fallback.Role)
	case EventFallbackSucceeded:
		return fmt.Sprintf("retry_fallback_succeeded %s (%s)", ev.Fallback.To, ev.Fallback.Role)
	case EventModelChange:
		return fmt.Sprintf("model_change %s -> %s (%s)", ev.Change.From, ev.Change.To, ev.Change.Reason)
	case EventCompactionRequired:
		return fmt.Sprintf("compaction_required %q", ev.Error)
	}
	return ev.Kind.String()
}

// diff shows the first differing line of two scripts.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  want: %s\n  got:  %s", i+1, wl, gl)
		}
	}
	return ""
}
