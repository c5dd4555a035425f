package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/session"
)

func user(text string) *messages.Entry {
	return &messages.Entry{Entry: &messages.Entry_User{User: &messages.UserMessage{Text: text}}}
}

func assistant(text string, stop messages.StopReason, errText string) *messages.Entry {
	return &messages.Entry{Entry: &messages.Entry_Assistant{Assistant: &messages.AssistantMessage{
		Content:    []*messages.ContentBlock{{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: text}}}},
		StopReason: stop, ErrorMessage: errText}}}
}

// TestPromptOutcome reads a prompt's end from a history, as a handle does
// when the session's new activation no longer knows the prompt by its
// generation.
func TestPromptOutcome(t *testing.T) {
	const stop, failed = messages.StopReason_STOP_REASON_STOP, messages.StopReason_STOP_REASON_ERROR
	tests := []struct {
		name    string
		entries []*messages.Entry
		want    string // "": no outcome; "ok TEXT"; "failed ERROR"
	}{
		{"empty history", nil, ""},
		{"the prompt not recorded", []*messages.Entry{user("other"), assistant("a", stop, "")}, ""},
		{"recorded, not answered", []*messages.Entry{user("hi")}, ""},
		{"answered after failed attempts", []*messages.Entry{user("hi"), assistant("", failed, "503"), assistant("", failed, "503"), assistant("hello", stop, "")}, "ok hello"},
		{"retries exhausted", []*messages.Entry{user("hi"), assistant("", failed, "503"), assistant("", failed, "overloaded")}, "failed overloaded"},
		{"interrupted", []*messages.Entry{user("hi"), assistant("", messages.StopReason_STOP_REASON_ABORTED, "interrupted: x")}, "failed interrupted: x"},
		{"the last of two same prompts", []*messages.Entry{user("hi"), assistant("first", stop, ""), user("hi"), assistant("second", stop, "")}, "ok second"},
		{"an earlier answer is not this prompt's", []*messages.Entry{user("x"), assistant("old", stop, ""), user("hi")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := promptOutcome(tt.entries, "hi", 7)
			var got string
			switch {
			case res == nil:
			case res.GetErrorKind() == string(session.KindFailed):
				got = "failed " + res.GetError()
			case res.GetErrorKind() == "":
				got = "ok " + res.GetMessage().GetContent()[0].GetText().GetText()
			default:
				got = "kind " + res.GetErrorKind()
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if res != nil && res.GetGeneration() != 7 {
				t.Errorf("generation %d, want 7", res.GetGeneration())
			}
		})
	}
}

// TestSettledLedger: a prompt's end is told once; a session opened anew at
// rest (its generations counted from 0 again) starts a new account.
func TestSettledLedger(t *testing.T) {
	var l settledLedger
	if !l.first(3) || l.first(3) {
		t.Fatal("generation 3: want told once")
	}
	if !l.wait(3, 0) {
		t.Error("wait(3) after first(3): want true")
	}
	if l.wait(4, 10*time.Millisecond) {
		t.Error("wait(4) with nothing told: want false")
	}
	go func() { time.Sleep(5 * time.Millisecond); l.first(4) }()
	if !l.wait(4, 5*time.Second) {
		t.Error("wait(4) while it is told: want true")
	}
	l.opened(4) // the same activation: nothing forgotten
	if l.first(4) {
		t.Error("after opened(4), generation 4 told again")
	}
	l.opened(0) // a new activation, counting anew
	if !l.first(1) || !l.first(4) {
		t.Error("after opened(0): want generations 1 and 4 new")
	}
	for g := uint64(5); g < 5+2*keptGenerations; g++ {
		l.first(g)
	}
	if n := len(l.told); n > keptGenerations+1 {
		t.Errorf("%d generations kept, want at most %d", n, keptGenerations+1)
	}
}

// TestEventBacklogReplaysToEveryListener: every handle that listens to a
// resumed prompt's activation gets the prompt's events from its start, in
// order, whichever listened first; the kept events go once a caller
// attached, or the next prompt starts.
func TestEventBacklogReplaysToEveryListener(t *testing.T) {
	got := map[string][]uint64{}
	b := newEventBacklog(func(pid *actor.PID, ev *messages.SessionEvent) {
		got[pid.GetId()] = append(got[pid.GetId()], ev.GetSeq())
	})
	ev := func(seq uint64, set func(*messages.SessionEvent)) {
		e := &messages.SessionEvent{Seq: seq}
		if set != nil {
			set(e)
		}
		b.add(e)
	}
	ev(1, nil)
	metrics := b.relayTo("metrics", actor.NewPID("n3", "metrics"))
	ev(2, nil)
	b.relayTo("caller", actor.NewPID("n1", "caller"))
	ev(3, func(e *messages.SessionEvent) {
		e.Event = &messages.SessionEvent_AgentSettled{AgentSettled: &messages.AgentSettled{Generation: 1, Success: true}}
	})
	metrics()
	ev(4, nil)
	late := b.relayTo("late", actor.NewPID("n2", "late"))
	late()
	want := map[string][]uint64{"metrics": {1, 2, 3}, "caller": {1, 2, 3, 4}, "late": {1, 2, 3, 4}}
	for k, w := range want {
		if g := got[k]; !slices.Equal(g, w) {
			t.Errorf("%s got %v, want %v", k, g, w)
		}
	}
	ev(5, func(e *messages.SessionEvent) {
		e.Event = &messages.SessionEvent_AgentStart{AgentStart: &messages.AgentStart{Generation: 2}}
	})
	b.relayTo("next", actor.NewPID("n2", "next"))
	b.attached()
	b.relayTo("after", actor.NewPID("n2", "after"))
	if g := got["next"]; len(g) != 0 {
		t.Errorf("a handle listening after the next prompt began got %v, want nothing kept", g)
	}
	if g := got["after"]; len(g) != 0 {
		t.Errorf("a handle listening after an attach got %v, want nothing kept", g)
	}
}
