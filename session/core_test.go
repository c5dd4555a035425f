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

// fixedJitter is a jitter source giving r forever (set jitter=r): 0 gives
// 75 % of the nominal delays, 0.5 gives 87.5 %.
type fixedJitter float64

func (r fixedJitter) Float64() float64 { return float64(r) }

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
	src   retry.Source // the jitter source (nominal unless set jitter=r)
	now   time.Time
	token uint64 // of the last timer or ask
	turn  uint64 // of the last turn started
	buf   Effects
	// The tokens of the last ask-budget and the last arm-timer, and those
	// a script kept by name (keep-token NAME), for token=REF[+N].
	ask, timer  uint64
	reservation uint64 // the token of the last paced select-credential
	kept        map[string]uint64
	// showBudget: ask-budget shows its latest instant, auto_retry_start
	// the part of its delay the budget added (set showBudget=true).
	showBudget bool
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
	sc := newScript(t, resume)
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

// newScript is a script's core before its first input, with the
// scripts' defaults.
func newScript(t *testing.T, resume bool) *script {
	settings := retry.DefaultSettings()
	sc := &script{t: t, now: t0, cfg: Config{Model: "fake/m1", Role: "default", Settings: &settings},
		src: nominal{}, resume: resume, kept: map[string]uint64{}}
	// Model fallback is off unless a script sets it; the default role has a
	// chain (to fake/m2) unless a script sets fallbackChains=none.
	sc.cfg.Settings.ModelFallback = false
	sc.cfg.Settings.FallbackChains = map[string][]string{"default": {"fake/m2"}}
	// The provider fake has credentials unless a script sets credentials=none.
	sc.cfg.Credentialed = map[string]bool{"fake": true}
	sc.cfg.Budgeted = map[string]bool{"fake": true} // used with budget=true
	return sc
}

// input runs one command and renders the effects. Commands answering a
// token (backoff-done, credential-reply, fallback-reply, budget-grant,
// budget-release) take token=REF[+N] to answer another one: REF is ask
// (the last ask-budget's), timer (the last arm-timer's), last (the last
// timer's or ask's) or a name keep-token gave; +N adds N.
func (sc *script) input(line string) []string {
	sc.t.Helper()
	cmd, arg, _ := strings.Cut(line, " ")
	args := strings.Fields(arg)
	token, tokenSet := uint64(0), false
	if cmd != "set" {
		var rest []string
		for _, a := range args {
			if ref, ok := strings.CutPrefix(a, "token="); ok {
				token, tokenSet = sc.tokenRef(ref), true
				continue
			}
			rest = append(rest, a)
		}
		args = rest
	}
	tokenOr := func(dflt uint64) uint64 {
		if tokenSet {
			return token
		}
		return dflt
	}
	var in Input
	if cmd == "set" { // settings and config, before the first prompt: key=value ...
		if sc.core != nil {
			sc.t.Fatalf("%s: set after the core started", line)
		}
		for _, kv := range args {
			sc.set(kv)
		}
		return nil
	}
	if sc.core == nil {
		sc.cfg.FallbackRoles = map[string]bool{}
		for role, chain := range sc.cfg.Settings.FallbackChains {
			sc.cfg.FallbackRoles[role] = len(chain) > 0
		}
		sc.core = New(sc.cfg, sc.src)
	}
	switch cmd {
	case "advance":
		d, err := time.ParseDuration(arg)
		if err != nil {
			sc.t.Fatalf("advance %q: %v", arg, err)
		}
		sc.now = sc.now.Add(d)
		return nil
	case "keep-token": // NAME [REF]: remember a token (REF as in token=, last unless given)
		ref := "last"
		if len(args) == 2 {
			ref = args[1]
		}
		if len(args) == 0 || len(args) > 2 {
			sc.t.Fatalf("%s: want keep-token NAME [REF]", line)
		}
		sc.kept[args[0]] = sc.tokenRef(ref)
		return nil
	case "prompt": // recorded by the owner
		in = Input{Kind: InPrompt}
	case "prompt-unrecorded": // the owner could not record it
		in = Input{Kind: InPrompt, Err: arg}
	case "credential": // KEY [paced [switched] [wait=DUR limit=KIND] [token=REF]]
		in = sc.credential(args)
	case "delta":
		kind, text, _ := strings.Cut(arg, " ")
		in = Input{Kind: InTurnDelta, Turn: sc.turn, DeltaKind: kind, Delta: text}
	case "rate-limits": // REMAINING/LIMIT [at=-1s]: the running turn's headers announce its key's requests
		in = Input{Kind: InRateLimits, Turn: sc.turn, At: sc.now}
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "at="); ok {
				in.At = sc.at(v)
			} else {
				in.Limits = sc.limits(a)
			}
		}
	case "turn-end": // [limits=REMAINING/LIMIT] KIND ...: the limits its response announced, not yet told
		in = Input{Kind: InTurnEnded, Turn: sc.turn}
		if len(args) > 0 {
			if v, ok := strings.CutPrefix(args[0], "limits="); ok {
				in.Limits, args = sc.limits(v), args[1:]
			}
		}
		in.Message = sc.message(args)
	case "turn-end-unrecorded": // the owner could not record the message: "KIND ... | ERROR"
		kind, errText, _ := strings.Cut(arg, " | ")
		in = Input{Kind: InTurnEnded, Turn: sc.turn, Message: sc.message(strings.Fields(kind)), Err: errText}
	case "tools-done": // [key-free]
		in = Input{Kind: InToolsDone, Turn: sc.turn, KeyFree: len(args) > 0 && args[0] == "key-free"}
	case "backoff-done": // [key-free]: the key held is free in the node's view
		in = Input{Kind: InBackoffDone, Token: tokenOr(sc.token), Generation: sc.core.Generation(),
			KeyFree: len(args) > 0 && args[0] == "key-free"}
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
		in = Input{Kind: InCredentialReply, Token: tokenOr(sc.token)}
		if len(args) > 0 && args[0] == "switched" {
			in.Switched, in.Credential = true, args[1]
		}
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "retry-at="); ok {
				in.RetryAt = sc.at(v)
			}
		}
	case "fallback-reply": // "FROM TO [until=+60s]" | "none [back=+60s]"
		in = Input{Kind: InFallbackReply, Token: tokenOr(sc.token), Role: sc.cfg.Role}
		var models []string
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "until="); ok {
				in.CooldownUntil = sc.at(v)
			} else if v, ok := strings.CutPrefix(a, "back="); ok {
				in.Back = sc.at(v)
			} else if a != "none" {
				models = append(models, a)
			}
		}
		if len(models) >= 2 {
			in.Switched, in.From, in.To = true, models[0], models[1]
		}
	case "budget-grant": // AT (+2s: after now)
		in = Input{Kind: InBudgetGrant, Token: tokenOr(sc.token), At: sc.at(sc.arg(args))}
	case "budget-release": // AT: the held retry of the last ask-budget may go out then
		in = Input{Kind: InBudgetRelease, Token: tokenOr(sc.ask), At: sc.at(sc.arg(args))}
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
	case "passivate": // the marker of the last arm-timer's passivation (token=REF: another's)
		in = Input{Kind: InPassivate, Token: tokenOr(sc.timer)}
	default:
		var ok bool
		if in, ok = sc.lifecycleInput(cmd, args, arg); !ok {
			sc.t.Fatalf("unknown command %q", line)
		}
	}
	sc.buf.Reset()
	sc.core.Step(&sc.buf, sc.now, in)
	effects := sc.buf.List()
	out := make([]string, 0, len(effects)+1)
	for i := range effects {
		out = append(out, sc.render(&effects[i]))
	}
	state := "state " + sc.core.State().Phase()
	if p := sc.core.Presence(); p != Present {
		state += " (" + p.String() + ")"
	}
	out = append(out, state)
	// A core away from its actors (passivated, left) is its activation's
	// to the end of its script: the next one resumes from its record.
	if st := sc.core.State(); sc.resume && (st == Idle || st == Backoff) && sc.core.Presence() == Present {
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
		if sc.core, err = Resume(sc.cfg, sc.src, rec); err != nil {
			sc.t.Fatalf("Resume: %v", err)
		}
		sc.resumed++
	}
	return out
}

func (sc *script) set(kv string) {
	k, v, _ := strings.Cut(kv, "=")
	s := sc.cfg.Settings
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
	case "paced": // none | provider,provider
		sc.cfg.Paced = providers(v)
	case "limited": // none | provider,provider
		sc.cfg.Limited = providers(v)
	case "queueWait":
		sc.cfg.QueueWait, _ = time.ParseDuration(v)
	case "passivateAfter":
		sc.cfg.PassivateAfter, _ = time.ParseDuration(v)
	case "maxRetries":
		s.MaxRetries, _ = strconv.Atoi(v)
	case "budget":
		s.Budget.Enabled = v == "true"
	case "maxDelay":
		s.MaxDelay, _ = time.ParseDuration(v)
	case "baseDelay":
		s.BaseDelay, _ = time.ParseDuration(v)
	case "jitter": // the jitter source gives v forever
		r, err := strconv.ParseFloat(v, 64)
		if err != nil {
			sc.t.Fatalf("jitter %q: %v", v, err)
		}
		sc.src = fixedJitter(r)
	case "showBudget":
		sc.showBudget = v == "true"
	case "recorded":
		sc.cfg.Recorded = v == "true"
	default:
		sc.t.Fatalf("unknown setting %q", kv)
	}
}

// tokenRef is the token ref names: ask, timer, last or a kept name, with
// an optional +N.
func (sc *script) tokenRef(ref string) uint64 {
	name, plus, _ := strings.Cut(ref, "+")
	var n uint64
	if plus != "" {
		var err error
		if n, err = strconv.ParseUint(plus, 10, 64); err != nil {
			sc.t.Fatalf("token=%s: %v", ref, err)
		}
	}
	switch name {
	case "ask":
		return sc.ask + n
	case "timer":
		return sc.timer + n
	case "last":
		return sc.token + n
	}
	tok, ok := sc.kept[name]
	if !ok {
		sc.t.Fatalf("token=%s: no token kept as %q", ref, name)
	}
	return tok + n
}

// arg is a command's one argument.
func (sc *script) arg(args []string) string {
	if len(args) != 1 {
		sc.t.Fatalf("want one argument, got %q", args)
	}
	return args[0]
}

// at reads "+20s" (or "-1m") as an instant relative to the script's now.
func (sc *script) at(v string) time.Time {
	d, err := time.ParseDuration(strings.TrimPrefix(v, "+"))
	if err != nil {
		sc.t.Fatalf("instant %q: %v", v, err)
	}
	return sc.now.Add(d)
}

// message builds a turn's message: "stop TEXT", "tool-use NAME",
// "error STATUS [MOD...] TEXT...", "refusal [MOD...] TEXT...", "aborted".
// The MODs before an error's or refusal's text: header:NAME=VALUE (a
// response header), output:text or output:tool-call (what the turn had
// streamed before it failed), details:TYPE (a refusal's stop details type,
// sensitive unless set).
func (sc *script) message(args []string) *messages.AssistantMessage {
	if len(args) == 0 {
		sc.t.Fatal("turn-end needs a kind")
	}
	switch args[0] {
	case "error", "refusal":
		first := 1
		if args[0] == "error" {
			first = 2
		}
		if len(args) < first {
			sc.t.Fatalf("turn-end %s: too few arguments", args[0])
		}
		m, details := sc.failure(args[0], args[first:])
		if args[0] == "error" {
			status, _ := strconv.Atoi(args[1])
			m.HttpStatus = int32(status)
		} else {
			m.StopDetails = &messages.StopDetails{Type: details}
		}
		return m
	}
	rest := strings.Join(args[1:], " ")
	switch args[0] {
	case "stop":
		return &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_STOP,
			Content: []*messages.ContentBlock{{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: rest}}}}}
	case "tool-use":
		return &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_TOOL_USE,
			Content: []*messages.ContentBlock{{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: "call_1", Name: rest}}}}}
	case "aborted":
		return &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ABORTED, ErrorMessage: retry.AbortSentinel}
	}
	sc.t.Fatalf("unknown turn-end kind %q", args[0])
	return nil
}

// failure builds a failed turn's message from its MODs and text (see
// message); it returns the stop details type the MODs gave.
func (sc *script) failure(kind string, args []string) (*messages.AssistantMessage, string) {
	m := &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ERROR}
	details := retry.StopDetailSensitive
	for len(args) > 0 {
		k, v, _ := strings.Cut(args[0], ":")
		switch {
		case k == "header" && strings.Contains(v, "="):
			name, value, _ := strings.Cut(v, "=")
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[name] = value
		case k == "output" && v == "text":
			m.Content = append(m.Content, &messages.ContentBlock{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: "partial"}}})
		case k == "output" && v == "tool-call":
			m.Content = append(m.Content, &messages.ContentBlock{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: "call_1", Name: "ls"}}})
		case k == "details" && kind == "refusal" && v != "":
			details = v
		default:
			m.ErrorMessage = strings.Join(args, " ")
			return m, details
		}
		args = args[1:]
	}
	return m, details
}

// render writes one effect as a line; it remembers the tokens and turns
// later inputs answer.
func (sc *script) render(e *Effect) string {
	switch e.Kind {
	case Emit:
		if e.Event.Kind == EventAutoRetryStart && sc.showBudget {
			return "emit " + renderEvent(e.Event) + " budget=" + e.Event.Start.BudgetDelay.String()
		}
		return "emit " + renderEvent(e.Event)
	case AppendModelChange:
		return fmt.Sprintf("append-model-change %s -> %s (%s)", e.Change.From, e.Change.To, e.Change.Reason)
	case SelectCredential:
		line := fmt.Sprintf("%s %s", e.Kind, e.Model)
		if e.Credential != "" {
			line += " keep=" + e.Credential
		}
		if e.Pace {
			sc.reservation = e.Token
			line += fmt.Sprintf(" pace token=%d", e.Token)
		}
		if len(e.Fallbacks) > 0 {
			line += " fallbacks=" + strings.Join(e.Fallbacks, ",")
		}
		return line
	case SettleReservation:
		line := fmt.Sprintf("%s %s credential=%s token=%d", e.Kind, e.Model, e.Credential, e.Token)
		if e.Limits != nil {
			line += " limits=" + renderLimits(e.Limits)
		}
		return line
	case ObserveRateLimits:
		return fmt.Sprintf("%s %s credential=%s at=%s limits=%s", e.Kind, e.Model, e.Credential, e.At.Sub(sc.now), renderLimits(e.Limits))
	case CancelReservation:
		return fmt.Sprintf("%s %s token=%d", e.Kind, e.Model, e.Token)
	case ResetProviderSession, DropBudgetHold, ReleaseSession:
		return fmt.Sprintf("%s %s", e.Kind, e.Model)
	case StartTurn:
		sc.turn = e.Turn
		return fmt.Sprintf("start-turn %d %s credential=%s", e.Turn, e.Model, e.Credential)
	case RunTools:
		return fmt.Sprintf("run-tools %d calls=%d", e.Turn, len(e.Calls))
	case ArmTimer:
		sc.token, sc.timer = e.Token, e.Token
		line := fmt.Sprintf("arm-timer %s then continue %s gen=%d", e.Delay, e.ContinueDelay, e.Generation)
		if e.Passivate {
			line += " passivate"
		}
		return line
	case AskCredentialSwitch:
		sc.token = e.Token
		return fmt.Sprintf("ask-credential-switch %s block=%s", e.Model, e.Cooldown)
	case AskFallback:
		sc.token = e.Token
		return fmt.Sprintf("ask-fallback %s primary=%s role=%s cooldown=%s pin=%t", e.Model, e.Primary, e.Role, e.Cooldown, e.Pin)
	case AskBudget:
		sc.token, sc.ask = e.Token, e.Token
		s := fmt.Sprintf("ask-budget %s due=+%s", e.Model, e.Due.Sub(sc.now))
		if sc.showBudget {
			if e.Latest.IsZero() {
				return s + " latest=none"
			}
			return s + " latest=+" + e.Latest.Sub(sc.now).String()
		}
		return s
	case CancelTimer:
		if e.Token != sc.timer {
			sc.t.Errorf("cancel-timer %d: the timer armed last is %d", e.Token, sc.timer)
		}
		return e.Kind.String()
	case ReportOutcome:
		return fmt.Sprintf("report-outcome %s success=%t", e.Model, e.Success)
	case Compact:
		return "compact gen=" + strconv.FormatUint(e.Generation, 10)
	case Settle, RejectPrompt, ReplyAttach:
		r := e.Result
		if r.Error == "" {
			return fmt.Sprintf("%s gen=%d ok", e.Kind, r.Generation)
		}
		return fmt.Sprintf("%s gen=%d %s %q", e.Kind, r.Generation, r.ErrorKind, r.Error)
	case RejectCompaction, ReplyCompaction, RefuseHandOver, ReplyHandOver:
		if e.Error == "" {
			return e.Kind.String() + " ok"
		}
		return fmt.Sprintf("%s %q", e.Kind, e.Error)
	case AttachCaller:
		return fmt.Sprintf("%s gen=%d", e.Kind, e.Generation)
	case HandOver, Leave: // the running prompt's caller is told
		if r := e.Result; r != nil {
			return fmt.Sprintf("%s gen=%d %s", e.Kind, r.Generation, r.ErrorKind)
		}
	}
	return e.Kind.String()
}

// limits reads "REMAINING/LIMIT" as what a response announced of its
// key's requests limit.
func (sc *script) limits(v string) *messages.RateLimits {
	rem, lim, ok := strings.Cut(v, "/")
	r, err1 := strconv.ParseInt(rem, 10, 64)
	l, err2 := strconv.ParseInt(lim, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		sc.t.Fatalf("limits %q: want REMAINING/LIMIT", v)
	}
	return &messages.RateLimits{Requests: &messages.RateLimit{Remaining: &r, Limit: &l}}
}

// renderLimits writes the requests limit a response announced as
// REMAINING/LIMIT.
func renderLimits(l *messages.RateLimits) string {
	return fmt.Sprintf("%d/%d", l.GetRequests().GetRemaining(), l.GetRequests().GetLimit())
}

// lifecycleInput reads the commands of what a session does between and
// around its prompts (lifecycle.go):
//
//	compact                         a caller asks for a compaction
//	attach [gen=N] [own-caller] [replaces]
//	hand-over [taken]               taken: another activation has the session
//	hand-over-failed ERROR          the hand-over's record was not written
//	taken                           another activation has the session
//	wake                            a passivated session is back with its actors
func (sc *script) lifecycleInput(cmd string, args []string, arg string) (Input, bool) {
	switch cmd {
	case "compact":
		return Input{Kind: InCompact}, true
	case "attach":
		in := Input{Kind: InAttach}
		for _, a := range args {
			switch k, v, _ := strings.Cut(a, "="); k {
			case "gen":
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					sc.t.Fatalf("attach gen=%s: %v", v, err)
				}
				in.Generation = n
			case "own-caller":
				in.OwnCaller = true
			case "replaces":
				in.Replaces = true
			default:
				sc.t.Fatalf("attach: unknown %q", a)
			}
		}
		return in, true
	case "hand-over":
		return Input{Kind: InHandOver, Taken: len(args) > 0 && args[0] == "taken"}, true
	case "hand-over-failed":
		return Input{Kind: InHandOverFailed, Err: arg}, true
	case "taken":
		return Input{Kind: InTaken}, true
	case "wake":
		return Input{Kind: InWake}, true
	}
	return Input{}, false
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
	case EventCompactionEnd:
		s := fmt.Sprintf("compaction_end %s willRetry=%t", ev.Reason, ev.WillRetry)
		if ev.Aborted {
			s += " aborted"
		}
		if ev.Error != "" {
			s += fmt.Sprintf(" error=%q", ev.Error)
		}
		return s
	case EventCredentialSwitch:
		if r := ev.Switch.Reason; r != SwitchUsageLimit {
			return fmt.Sprintf("credential_switch %s -> %s (%s)", ev.Switch.From, ev.Switch.To, r)
		}
	case EventRetryReleased:
		return fmt.Sprintf("retry_released %d delay=%s", ev.Attempt, ev.Delay)
	case EventCapacityWait:
		s := fmt.Sprintf("capacity_wait %s queued=%d", ev.Capacity.Model, ev.Capacity.Queued)
		if ev.Capacity.Delay > 0 {
			s += " delay=" + ev.Capacity.Delay.String()
		}
		return s
	case EventRateLimitWait:
		return fmt.Sprintf("rate_limit_wait %s credential=%s limit=%s delay=%s", ev.Wait.Model, ev.Wait.Credential, ev.Wait.Limit, ev.Wait.Delay)
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

// A plain retry attempt — the failed turn's end, then the backoff's end —
// allocates nothing in the core once its Effects has grown: the chain's
// state is the core's, and effects and events are written in place.
func TestCoreAttemptAllocs(t *testing.T) {
	s := retry.DefaultSettings()
	s.MaxRetries = 1 << 30
	c := New(Config{Model: "fake/m1", Role: "default", Settings: &s}, nominal{})
	failed := &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ERROR,
		ErrorMessage: "503 Service Unavailable", HttpStatus: 503}
	var out Effects
	step := func(in Input) (turn, token uint64) {
		out.Reset()
		c.Step(&out, t0, in)
		for _, e := range out.List() {
			switch e.Kind {
			case StartTurn:
				turn = e.Turn
			case ArmTimer:
				token = e.Token
			}
		}
		return turn, token
	}
	turn, _ := step(Input{Kind: InPrompt})
	attempt := func() {
		_, token := step(Input{Kind: InTurnEnded, Turn: turn, Message: failed})
		turn, _ = step(Input{Kind: InBackoffDone, Token: token, Generation: c.Generation()})
	}
	attempt() // grows the Effects
	if n := testing.AllocsPerRun(100, attempt); n != 0 {
		t.Errorf("a retry attempt allocates %v times in the core; want 0", n)
	}
	if turn == 0 || c.State() != Streaming {
		t.Fatalf("the attempts did not start turns: state %s", c.State())
	}
}

// The chain's attempt counter stops at its bound rather than overflow: a
// chain that has counted 2^31-1 attempts counts its next failure as the
// same attempt (and backs off the capped 8 s).
func TestChainAttemptNeverOverflows(t *testing.T) {
	s := retry.DefaultSettings()
	s.MaxRetries, s.ModelFallback = maxAttempt, false
	c := New(Config{Model: "fake/m1", Role: "default", Settings: &s}, nominal{})
	var out Effects
	c.Step(&out, t0, Input{Kind: InPrompt})
	c.r.Chain.Attempt = maxAttempt // as after 2^31-1 failed attempts
	out.Reset()
	c.Step(&out, t0, Input{Kind: InTurnEnded, Turn: 1, Message: &messages.AssistantMessage{
		StopReason: messages.StopReason_STOP_REASON_ERROR, ErrorMessage: "503 Service Unavailable", HttpStatus: 503}})
	if c.r.Chain.Attempt != maxAttempt {
		t.Fatalf("attempt = %d, want it held at %d", c.r.Chain.Attempt, maxAttempt)
	}
	for _, e := range out.List() {
		if e.Kind == Emit && e.Event.Kind == EventAutoRetryStart {
			if st := e.Event.Start; st.Attempt != maxAttempt || st.Delay != 8*time.Second {
				t.Fatalf("auto_retry_start attempt %d delay %s, want %d after 8s", st.Attempt, st.Delay, maxAttempt)
			}
			return
		}
	}
	t.Fatal("no auto_retry_start")
}

// providers is the set of providers "p1,p2" names (nil for "none").
func providers(v string) map[string]bool {
	if v == "none" {
		return nil
	}
	out := map[string]bool{}
	for _, p := range strings.Split(v, ",") {
		out[p] = true
	}
	return out
}

// credential reads a credentials actor's answer: "KEY", or for a paced
// ask "KEY paced [switched] [wait=DUR limit=KIND | queued=N] [token=REF]" (the token of
// the last paced select-credential unless token= says another).
func (sc *script) credential(args []string) Input {
	in := Input{Kind: InCredentialSelected}
	if len(args) == 0 {
		return in
	}
	in.Credential = args[0]
	for _, a := range args[1:] {
		switch k, v, _ := strings.Cut(a, "="); k {
		case "paced":
			in.Token = sc.reservation
		case "switched":
			in.Switched = true
		case "wait":
			d, err := time.ParseDuration(v)
			if err != nil {
				sc.t.Fatalf("wait=%s: %v", v, err)
			}
			in.Wait = d
		case "limit":
			in.Limit = v
		case "queued":
			in.Queued, _ = strconv.Atoi(v)
		case "model":
			in.Model = v
		case "token":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				sc.t.Fatalf("token=%s: %v", v, err)
			}
			in.Token = n
		default:
			sc.t.Fatalf("credential: unknown %q", a)
		}
	}
	return in
}
