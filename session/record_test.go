package session

import (
	"reflect"
	"strings"
	"testing"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// Every field of Core is in its Record, or is one of those a core at rest
// does without: a new field must say which.
func TestRecordCoversTheCore(t *testing.T) {
	notAtRest := map[string]string{
		"role":            "the session's configuration (Config.Role), given again to Resume",
		"compaction":      "the session's configuration (Config.Compaction), given again to Resume",
		"credentialed":    "the runtime's configuration (Config.Credentialed), given again to Resume",
		"noSwitch":        "the chain's answer the core gives itself, within a step",
		"enabled":         "recorded as AutoRetry",
		"src":             "the jitter source, given to Resume",
		"ch":              "recorded as Chain",
		"settings":        "the session's configuration (Config.Settings), given again to Resume",
		"noFallbackChain": "the session's configuration (Config.Settings' fallback chains), given again to Resume",
		"compactNext":     "the step's routing to compaction, within a step",
		"continuing":      "set when a continue starts, read until its credential is chosen",
		"askPin":          "read when the fallback asked for answers, within a decision",
		"toolsAfterEnd":   "the calls of a tool-use turn, run within its decision",
		"now":             "the instant of the step running",
		"out":             "the effects of the step running",
		"beforeChange":    "recorded as Before",
		"gen":             "recorded as Generation",
		"pinned":          "recorded as Pinned",
		"primaryUntil":    "recorded as PrimaryUntil",
		"aborts":          "recorded as Aborts",
		"last":            "recorded as Last",
		"failureKind":     "recorded as FailureKind",
		"retryEnd":        "recorded as RetryEnd",
	}
	recorded := map[string]bool{}
	rt := reflect.TypeFor[Record]()
	for i := range rt.NumField() {
		recorded[strings.ToLower(rt.Field(i).Name)] = true
	}
	ct := reflect.TypeFor[Core]()
	for i := range ct.NumField() {
		name := ct.Field(i).Name
		if _, ok := notAtRest[name]; !ok && !recorded[strings.ToLower(name)] {
			t.Errorf("Core.%s is neither in Record nor listed as not needed at rest", name)
		}
	}
}

// A record is taken only at rest, and a wire record naming a state, phase
// or class this program does not know is refused, not guessed.
func TestRecordRefusals(t *testing.T) {
	c := New(Config{Model: "fake/m1", Role: "default", Settings: retry.DefaultSettings(), Credentialed: map[string]bool{"fake": true}}, nominal{})
	c.Step(new(Effects), t0, Input{Kind: InPrompt})
	if _, err := c.Record(); err == nil || !strings.Contains(err.Error(), "selecting_credential") {
		t.Errorf("Record while selecting a credential = %v, want an error naming the state", err)
	}
	if _, err := Resume(Config{}, nominal{}, Record{State: Streaming}); err == nil {
		t.Error("Resume of a streaming record succeeded")
	}
	idle, err := New(Config{Model: "fake/m1", Settings: retry.DefaultSettings()}, nominal{}).Record()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		edit func(*messages.SessionRecord)
	}{
		{"state", func(w *messages.SessionRecord) { w.State = "hibernating" }},
		{"chain phase", func(w *messages.SessionRecord) { w.Chain.Phase = "pondering" }},
		{"error class", func(w *messages.SessionRecord) { w.Chain.Class = "cosmic_ray" }},
		{"class of the failed chain", func(w *messages.SessionRecord) {
			w.RetryEnd = &messages.RecordRetryEnd{Class: "cosmic_ray"}
		}},
	} {
		w := idle.Wire()
		tt.edit(w)
		if _, err := RecordFromWire(w); err == nil {
			t.Errorf("unknown %s accepted", tt.name)
		}
	}
	if _, err := RecordFromWire(idle.Wire()); err != nil {
		t.Errorf("the idle record read back: %v", err)
	}
}
