package session

import (
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// FuzzCore feeds random inputs (answering the core's own asks and timers
// most of the time), the lifecycle's around its prompts among them
// (compaction on request, attach, hand-over, passivation), and checks the
// invariants of a session: it never panics, each prompt settles at most
// once, and Busy is exactly "a prompt runs". Half the runs put the
// model on a provider with an overload limiter (places, the cooling wait,
// a fallback at once).
func FuzzCore(f *testing.F) {
	f.Add([]byte{0, 1, 3, 5, 6, 1, 2})
	f.Add([]byte{0, 1, 4, 7, 0, 8, 9, 10, 11})
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := retry.DefaultSettings()
		s.Budget.Enabled = len(ops) > 0 && ops[0]%2 == 0
		s.FallbackChains = map[string][]string{"default": {"fake/m2"}}
		cfg := Config{Model: "fake/m1", Role: "default", Settings: &s, Compaction: len(ops)%3 == 0, Budgeted: map[string]bool{"fake": true},
			Recorded: true, PassivateAfter: time.Second, FallbackRoles: map[string]bool{"default": true}}
		if len(ops) > 1 && ops[1]%2 == 0 {
			cfg.Credentialed, cfg.Limited, cfg.QueueWait = map[string]bool{"fake": true}, map[string]bool{"fake": true}, time.Minute
		}
		c := New(cfg, nominal{})
		now := t0
		var token, turn uint64
		settled := map[uint64]bool{}
		var buf Effects
		msgs := []*messages.AssistantMessage{
			{StopReason: messages.StopReason_STOP_REASON_STOP},
			{StopReason: messages.StopReason_STOP_REASON_ERROR, ErrorMessage: "503 Service Unavailable", HttpStatus: 503},
			{StopReason: messages.StopReason_STOP_REASON_ERROR, ErrorMessage: "You exceeded your current quota", HttpStatus: 429},
			{StopReason: messages.StopReason_STOP_REASON_ERROR, ErrorMessage: "prompt is too long", HttpStatus: 400},
			{StopReason: messages.StopReason_STOP_REASON_ERROR, ErrorMessage: "refused", StopDetails: &messages.StopDetails{Type: "refusal"}},
			{StopReason: messages.StopReason_STOP_REASON_TOOL_USE, Content: []*messages.ContentBlock{{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: "1"}}}}},
			{StopReason: messages.StopReason_STOP_REASON_ABORTED, ErrorMessage: retry.AbortSentinel},
		}
		for i, op := range ops {
			now = now.Add(time.Duration(op) * time.Millisecond)
			var in Input
			switch op % 20 {
			case 0:
				in = Input{Kind: InPrompt}
			case 1:
				in = Input{Kind: InCredentialSelected, Credential: "k"}
				switch op % 4 {
				case 1: // the answer to a place asked
					in.Token = turn + 1
				case 2: // queued for a place
					in.Token, in.Queued = turn+1, 3
				case 3: // seated on the fallback at once
					in.Token, in.Model = turn+1, "fake/m2"
				}
			case 2:
				in = Input{Kind: InTurnEnded, Turn: turn, Message: msgs[int(op/20)%len(msgs)]}
			case 3:
				in = Input{Kind: InToolsDone, Turn: turn}
			case 4, 5:
				in = Input{Kind: InBackoffDone, Token: token, Generation: c.Generation()}
			case 6:
				in = Input{Kind: InAbort}
			case 7:
				in = Input{Kind: InAbortRetry}
			case 8:
				in = Input{Kind: InCredentialReply, Token: token, Switched: op%2 == 0, Credential: "k2", RetryAt: now.Add(time.Second)}
			case 9:
				in = Input{Kind: InFallbackReply, Token: token, Switched: op%2 == 0, From: "fake/m1", To: "fake/m2"}
				if !in.Switched {
					in.Back = now.Add(time.Duration(op) * time.Second) // the role's models cool down
				}
			case 10:
				in = Input{Kind: InBudgetGrant, Token: token, At: now}
			case 11:
				in = Input{Kind: InCompactionDone, Generation: c.Generation()}
			case 12:
				in = Input{Kind: InSetAutoRetry, Enabled: op%2 == 0}
			case 13:
				in = Input{Kind: InEditGuardAbort}
			case 14:
				in = Input{Kind: InTimerLost}
			case 15:
				in = Input{Kind: InCompact}
			case 16:
				in = Input{Kind: InAttach, OwnCaller: op%2 == 0}
			case 17:
				in = Input{Kind: InHandOver, Taken: op%4 == 1}
			case 18:
				in = Input{Kind: InPassivate, Token: token}
			case 19:
				in = Input{Kind: InWake}
				if op%2 == 0 {
					in = Input{Kind: InHandOverFailed, Err: "disk full"}
				}
			}
			if i == len(ops)-1 && op%5 == 0 {
				in = Input{Kind: InStop}
			}
			buf.Reset()
			c.Step(&buf, now, in)
			for _, e := range buf.List() {
				switch e.Kind {
				case ArmTimer, AskCredentialSwitch, AskFallback, AskBudget:
					token = e.Token
				case StartTurn, RunTools:
					turn = e.Turn
				case Settle:
					if settled[e.Result.Generation] {
						t.Fatalf("generation %d settled twice", e.Result.Generation)
					}
					settled[e.Result.Generation] = true
				}
			}
			if !c.Busy() != (c.Generation() == 0 || settled[c.Generation()]) {
				t.Fatalf("state %v, generation %d settled %t", c.State(), c.Generation(), settled[c.Generation()])
			}
			if st := c.State(); op%3 == 0 && (st == Idle || st == Backoff) { // moved to another node
				rec, err := c.Record()
				if err != nil {
					t.Fatal(err)
				}
				if rec, err = RecordFromWire(rec.Wire()); err != nil {
					t.Fatal(err)
				}
				if c, err = Resume(cfg, nominal{}, rec); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
