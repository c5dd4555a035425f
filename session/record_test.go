package session

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// A core's state is its Record (the field r), defined once: every other
// field of Core is the session's configuration, given again to Resume, or
// lives within a step or a decision, never at rest. A new field must say
// which, or go into Record.
func TestRecordCoversTheCore(t *testing.T) {
	notAtRest := map[string]string{
		"r":                "the record itself",
		"step":             "the step function of the record's state, set with it (become)",
		"src":              "the jitter source, given to Resume",
		"settings":         "the session's configuration (Config.Settings), given again to Resume",
		"compaction":       "the session's configuration (Config.Compaction), given again to Resume",
		"credentialed":     "the runtime's configuration (Config.Credentialed), given again to Resume",
		"budgeted":         "the runtime's configuration (Config.Budgeted), given again to Resume",
		"pacedProviders":   "the runtime's configuration (Config.Paced), given again to Resume",
		"passivateAfter":   "the runtime's configuration (Config.PassivateAfter), given again to Resume",
		"limitedProviders": "the runtime's configuration (Config.Limited), given again to Resume",
		"queueWait":        "the runtime's configuration (Config.QueueWait), given again to Resume",
		"queued":           "a wait for a place (SelectingCredential), never at rest",
		"noFallbackChain":  "the runtime's configuration (Config.FallbackRoles), given again to Resume",
		"recorded":         "the session's configuration (Config.Recorded), given again to Resume",
		"presence":         "the activation's: a core resumed from a record is with its new actors",
		"handingOver":      "done in the step that finds the session at rest: never set at rest",
		"now":              "the instant of the step running",
		"out":              "the effects of the step running",
	}
	ct := reflect.TypeFor[Core]()
	for i := range ct.NumField() {
		if name := ct.Field(i).Name; notAtRest[name] == "" {
			t.Errorf("Core.%s is neither in Record nor listed as not needed at rest", name)
		}
	}
}

// A record is taken only at rest, and a wire record naming a state or
// class this program does not know is refused, not guessed.
func TestRecordRefusals(t *testing.T) {
	c := New(Config{Model: "fake/m1", Role: "default", Credentialed: map[string]bool{"fake": true}}, nominal{})
	c.Step(new(Effects), t0, Input{Kind: InPrompt})
	if _, err := c.Record(); err == nil || !strings.Contains(err.Error(), "selecting_credential") {
		t.Errorf("Record while selecting a credential = %v, want an error naming the state", err)
	}
	if _, err := Resume(Config{}, nominal{}, Record{State: Streaming}); err == nil {
		t.Error("Resume of a streaming record succeeded")
	}
	idle, err := New(Config{Model: "fake/m1"}, nominal{}).Record()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		edit func(*messages.SessionRecord)
	}{
		{"state", func(w *messages.SessionRecord) { w.State = "hibernating" }},
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

// Every field of a Record reaches the other side of its wire form: a
// record with every field set (each to a value of its own) comes back
// from Wire, protobuf bytes and RecordFromWire the same. A field added to
// Record without its wire mapping fails here.
func TestRecordWireCarriesEveryField(t *testing.T) {
	var r Record
	fill(t, reflect.ValueOf(&r).Elem(), "Record")
	b, err := proto.Marshal(r.Wire())
	if err != nil {
		t.Fatal(err)
	}
	var w messages.SessionRecord
	if err := proto.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	got, err := RecordFromWire(&w)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.Last, r.Last) {
		t.Errorf("Last: got %v, want %v", got.Last, r.Last)
	}
	got.Last, r.Last = nil, nil
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip:\n got  %+v\n want %+v", got, r)
	}
}

// fill sets every field of v, recursively, to a valid value of its own
// (the enums to one they name), so that a field the wire form drops or
// mixes up shows.
func fill(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	seq := 0
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		seq++
		switch x := v.Addr().Interface().(type) {
		case *State:
			*x = Backoff
		case *retry.Class:
			*x = retry.Transient
		case *ErrorKind:
			*x = KindFailed
		case *time.Time:
			*x = time.Unix(0, int64(1e18)+int64(seq))
		case *time.Duration:
			*x = time.Duration(seq) * time.Second
		case **messages.AssistantMessage:
			*x = &messages.AssistantMessage{ErrorMessage: path, StopReason: messages.StopReason_STOP_REASON_ERROR}
		case **retry.EndEvent:
			*x = &retry.EndEvent{Attempt: seq, FinalError: path, Class: retry.UsageLimit}
		default:
			switch v.Kind() {
			case reflect.Struct:
				for i := range v.NumField() {
					walk(v.Field(i), path+"."+v.Type().Field(i).Name)
				}
			case reflect.Bool:
				v.SetBool(true)
			case reflect.Int, reflect.Int32, reflect.Int64:
				v.SetInt(int64(seq))
			case reflect.Uint64, reflect.Uint32:
				v.SetUint(uint64(seq))
			case reflect.String:
				v.SetString(path)
			default:
				t.Fatalf("%s: fill does not know %s", path, v.Type())
			}
		}
	}
	walk(v, path)
}

// A record written by an older program still loads: testdata holds two
// records that the program before issue 39 wrote (a chain in its second
// backoff, and the idle session after it), with the fields it has since
// dropped (attempt, sleep_token: what the chain's attempt and token say)
// and the chain's phase (what the state says). The one in backoff goes on
// where it stood: the same timer token, the same attempt.
func TestRecordWrittenBeforeLoads(t *testing.T) {
	read := func(name string) Record {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		var w messages.SessionRecord
		if err := proto.Unmarshal(b, &w); err != nil {
			t.Fatal(err)
		}
		r, err := RecordFromWire(&w)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	idle := read("record-v1-idle.binpb")
	if idle.State != Idle || idle.Chain.Attempt != 0 || idle.Turn != 3 || idle.Last.GetStopReason() != messages.StopReason_STOP_REASON_STOP {
		t.Errorf("the idle record read as %+v", idle)
	}
	rec := read("record-v1-backoff.binpb")
	due := t0.Add(time.Second)
	if rec.State != Backoff || rec.Chain.Attempt != 2 || rec.Chain.Token != 4 || !rec.SleepUntil.Equal(due) ||
		rec.Credential != "main" || rec.HistorySeq != 7 || rec.Chain.Class != retry.Transient || !rec.Chain.Started {
		t.Fatalf("the record in backoff read as %+v", rec)
	}
	settings := retry.DefaultSettings()
	cfg := Config{Model: "fake/m1", Role: "default", Settings: &settings, Credentialed: map[string]bool{"fake": true}}
	c, err := Resume(cfg, nominal{}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if c.BackoffToken() != 4 || !c.WaitingUntil().Equal(due) {
		t.Errorf("resumed: backoff token %d until %v, want 4 until %v", c.BackoffToken(), c.WaitingUntil(), due)
	}
	var out Effects
	c.Step(&out, t0.Add(400*time.Millisecond), Input{Kind: InTimerLost})
	if l := out.List(); len(l) != 1 || l[0].Kind != ArmTimer || l[0].Token != 4 || l[0].Delay != 600*time.Millisecond {
		t.Errorf("timer lost: %+v, want the timer of token 4 armed for 600ms", l)
	}
	out.Reset()
	c.Step(&out, due, Input{Kind: InBackoffDone, Token: 4, Generation: rec.Generation})
	if l := out.List(); len(l) != 2 || l[1].Kind != SelectCredential || l[1].Credential != "main" {
		t.Errorf("backoff done: %+v, want agent_start and the retry's select-credential", l)
	}
	out.Reset()
	c.Step(&out, due, Input{Kind: InCredentialSelected, Credential: "main"})
	c.Step(&out, due, Input{Kind: InTurnEnded, Turn: 3, Message: &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_STOP}})
	var end *retry.EndEvent
	for _, e := range out.List() {
		if e.Kind == Emit && e.Event.Kind == EventAutoRetryEnd {
			end = e.Event.End
		}
	}
	if end == nil || !end.Success || end.Attempt != 2 {
		t.Errorf("the resumed chain ended with %+v, want success at attempt 2", end)
	}
}
