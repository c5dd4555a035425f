package session

import (
	"reflect"
	"testing"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// A step fills its effects in place in storage the Effects reuses: once
// grown, a step allocates nothing for them, and Reset leaves no pointer
// behind.
func TestEffectsReuse(t *testing.T) {
	settings := retry.DefaultSettings()
	settings.Budget.Enabled, settings.ModelFallback = false, false // the turn's end starts the retry at once
	c := New(Config{Model: "fake/m1", Role: "default", Settings: &settings}, nominal{})
	var out Effects
	for _, in := range []Input{{Kind: InPrompt}, {Kind: InCredentialSelected, Credential: "k"}} {
		out.Reset()
		c.Step(&out, t0, in)
	}
	delta := Input{Kind: InTurnDelta, Turn: 1, DeltaKind: "text", Delta: "hi"}
	if n := testing.AllocsPerRun(100, func() {
		out.Reset()
		c.Step(&out, t0, delta)
	}); n != 0 {
		t.Errorf("a delta's step allocates %v times, want 0", n)
	}
	if l := out.List(); len(l) != 1 || l[0].Kind != Emit || l[0].Event.Kind != EventMessageUpdate || l[0].Event.Delta != "hi" {
		t.Fatalf("effects = %+v", l)
	}

	fail := &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ERROR, HttpStatus: 503, ErrorMessage: "503 Service Unavailable"}
	out.Reset()
	c.Step(&out, t0, Input{Kind: InTurnEnded, Turn: 1, Message: fail})
	var start *retry.StartEvent
	for _, e := range out.List() {
		if e.Kind == Emit && e.Event.Kind == EventAutoRetryStart {
			start = e.Event.Start
		}
	}
	if start == nil || start.Attempt != 1 || start.ErrorMessage != fail.ErrorMessage {
		t.Fatalf("auto_retry_start = %+v", start)
	}
	out.Reset()
	for i, e := range out.list[:cap(out.list)] {
		if !reflect.DeepEqual(e, Effect{}) {
			t.Errorf("effect %d left after Reset: %+v", i, e)
		}
	}
	for i, ev := range out.events[:cap(out.events)] {
		if ev != (Event{}) {
			t.Errorf("event %d left after Reset: %+v", i, ev)
		}
	}
}
