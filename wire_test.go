package musepi

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/musepi/musepi/messages"
)

// Every event of the wire protocol has a Go type whose Type() is the
// oneof field's name, so a subscriber never misses a kind of event.
func TestEveryWireEventHasAGoType(t *testing.T) {
	oneof := (&messages.SessionEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event")
	fields := oneof.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		ev := &messages.SessionEvent{SessionId: "s", Seq: 7, TimeMs: 1_700_000_000_123}
		r := ev.ProtoReflect()
		r.Set(fd, protoreflect.ValueOfMessage(r.NewField(fd).Message()))
		got, ok := fromWireEvent(ev)
		if !ok {
			t.Errorf("%s: no Go event", fd.Name())
			continue
		}
		h := got.Header()
		if got.Type() != string(fd.Name()) || h.SessionID != "s" || h.Seq != 7 || !h.Time.Equal(time.UnixMilli(1_700_000_000_123)) || h.Wire() != ev {
			t.Errorf("%s: got %T type %q header %+v", fd.Name(), got, got.Type(), h)
		}
	}
}

// Durations and instants arrive as time.Duration and time.Time.
func TestWireEventFields(t *testing.T) {
	ev := &messages.SessionEvent{Event: &messages.SessionEvent_AutoRetryStart{AutoRetryStart: &messages.AutoRetryStart{
		Attempt: 2, MaxAttempts: 10, DelayMs: 1500, ErrorMessage: "429", ErrorClass: "transient", BudgetDelayMs: 500}}}
	got, _ := fromWireEvent(ev)
	want := AutoRetryStart{EventHeader: got.Header(), Attempt: 2, MaxAttempts: 10, Delay: 1500 * time.Millisecond,
		ErrorMessage: "429", ErrorClass: "transient", BudgetDelay: 500 * time.Millisecond}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// Entries cross the boundary both ways unchanged (a compaction hook's
// result, the RPC's messages).
func TestEntriesRoundTrip(t *testing.T) {
	full := &messages.AssistantMessage{
		Content: []*messages.ContentBlock{
			{Block: &messages.ContentBlock_Thinking{Thinking: &messages.ThinkingBlock{Thinking: "hmm", Signature: "sig"}}},
			{Block: &messages.ContentBlock_RedactedThinking{RedactedThinking: &messages.RedactedThinkingBlock{Data: "xyz"}}},
			{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: "Hello, "}}},
			{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: "world"}}},
			{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: "c1", Name: "ls", ArgumentsJson: `{"dir":"/"}`}}},
		},
		StopReason: messages.StopReason_STOP_REASON_TOOL_USE, ErrorMessage: "", HttpStatus: 200,
		StopDetails: &messages.StopDetails{Type: "refusal", Fields: map[string]string{"category": "x"}},
		Headers:     map[string]string{"retry-after": "3"}, Provider: "p", Model: "m", TimestampMs: 1_700_000_000_000,
		Usage: &messages.Usage{Input: 1, Output: 2, CacheRead: 3, CacheWrite: 4}, ResponseModel: "m-2026",
	}
	entries := []*messages.Entry{
		{Seq: 1, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: "hi", TimestampMs: 1_700_000_000_000}}},
		{Seq: 2, Entry: &messages.Entry_Assistant{Assistant: full}},
		{Seq: 3, Entry: &messages.Entry_Assistant{Assistant: &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ERROR, ErrorMessage: "503"}}},
		{Seq: 4, Entry: &messages.Entry_ToolResult{ToolResult: &messages.ToolResult{ToolCallId: "c1", Name: "ls", Output: "a b", IsError: true, TimestampMs: 5}}},
		{Seq: 5, Entry: &messages.Entry_ModelChange{ModelChange: &messages.ModelChange{From: "p/a", To: "p/b", Role: "default", Reason: "fallback", Pinned: true, PrimaryCooldownUntilMs: 9}}},
	}
	goEntries := fromWireEntries(entries)
	a := goEntries[1].Assistant
	if a.Text() != "Hello, world" || a.StopReason != StopReasonToolUse || len(a.ToolCalls()) != 1 || a.ToolCalls()[0].Arguments != `{"dir":"/"}` ||
		*a.Usage != (Usage{1, 2, 3, 4}) || a.ResponseModel != "m-2026" || a.HTTPStatus != 200 || !a.Time.Equal(time.UnixMilli(1_700_000_000_000)) {
		t.Errorf("assistant entry %+v", a)
	}
	back := toWireEntries(goEntries)
	for i := range entries {
		if !proto.Equal(entries[i], back[i]) {
			t.Errorf("entry %d:\n  wire %v\n  back %v", i, entries[i], back[i])
		}
	}
	if !reflect.DeepEqual(fromWireEntries(back), goEntries) {
		t.Error("Go entries changed on a round trip")
	}
}

// A cluster handle's host_lost and resumed carry their member.
func TestHostEventsMember(t *testing.T) {
	lost, _ := fromWireEvent(&messages.SessionEvent{Event: &messages.SessionEvent_HostLost{HostLost: &messages.HostLost{Member: "127.0.0.1:7002"}}})
	resumed, _ := fromWireEvent(&messages.SessionEvent{Event: &messages.SessionEvent_Resumed{Resumed: &messages.Resumed{Member: "127.0.0.1:7003"}}})
	if l, ok := lost.(HostLost); !ok || l.Member != "127.0.0.1:7002" {
		t.Errorf("host_lost = %+v, want HostLost of 127.0.0.1:7002", lost)
	}
	if r, ok := resumed.(Resumed); !ok || r.Member != "127.0.0.1:7003" {
		t.Errorf("resumed = %+v, want Resumed on 127.0.0.1:7003", resumed)
	}
}

// Every field of an entry's wire form has its Go field and comes back:
// an entry of each kind, with every wire field set (each to a value of
// its own, every kind of content block), converts to an Entry whose every
// field is set and back to the same wire entry. A field added to the
// .proto or to message.go without its conversion in wire.go fails here.
// The assistant message's rate_limits is transient (the provider's
// answer to the pacer) and has no Go field.
func TestEntryConversionsCarryEveryField(t *testing.T) {
	transient := map[protoreflect.FullName]bool{"musepi.v1.AssistantMessage.rate_limits": true}
	oneof := (&messages.Entry{}).ProtoReflect().Descriptor().Oneofs().ByName("entry")
	for i := range oneof.Fields().Len() {
		w := &messages.Entry{}
		fillWire(w.ProtoReflect(), i, transient)
		e := fromWireEntries([]*messages.Entry{w})[0]
		if e.Seq == 0 {
			t.Errorf("%s: Seq not set", oneof.Fields().Get(i).Name())
		}
		parts := map[string]any{"User": e.User, "Assistant": e.Assistant, "ToolResult": e.ToolResult, "ModelChange": e.ModelChange}
		for name, p := range parts {
			if v := reflect.ValueOf(p); !v.IsNil() {
				checkSet(t, v.Elem(), name)
			}
		}
		for _, f := range changedFields(w.ProtoReflect(), e.Wire().ProtoReflect()) {
			t.Errorf("%s: %s changed on its way through the Go types", oneof.Fields().Get(i).Name(), f)
		}
	}
}

// changedFields are the names of the fields of a and b, recursively
// into singular messages, whose values differ.
func changedFields(a, b protoreflect.Message) []string {
	var out []string
	fields := a.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Message() != nil && !fd.IsList() && !fd.IsMap() && a.Has(fd) && b.Has(fd) {
			out = append(out, changedFields(a.Get(fd).Message(), b.Get(fd).Message())...)
			continue
		}
		only := func(m protoreflect.Message) proto.Message {
			o := m.New()
			if m.Has(fd) {
				o.Set(fd, m.Get(fd))
			}
			return o.Interface()
		}
		if !proto.Equal(only(a), only(b)) {
			out = append(out, string(fd.FullName()))
		}
	}
	return out
}

// fillWire sets every field of m but the transient ones, recursively, to
// a value of its own: of its oneof the member'th field, and a list of
// messages with a oneof gets one element per member.
func fillWire(m protoreflect.Message, member int, transient map[protoreflect.FullName]bool) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if o := fd.ContainingOneof(); transient[fd.FullName()] || o != nil && !o.IsSynthetic() && o.Fields().Get(member%o.Fields().Len()) != fd {
			continue
		}
		switch {
		case fd.IsMap():
			m.Mutable(fd).Map().Set(protoreflect.ValueOfString("key").MapKey(), wireValue(fd.MapValue()))
		case fd.IsList() && fd.Message() != nil:
			n := 1
			if oneofs := fd.Message().Oneofs(); oneofs.Len() > 0 {
				n = oneofs.Get(0).Fields().Len()
			}
			for k := range n {
				el := m.Mutable(fd).List().AppendMutable()
				fillWire(el.Message(), k, transient)
			}
		case fd.Message() != nil:
			fillWire(m.Mutable(fd).Message(), 0, transient)
		default:
			m.Set(fd, wireValue(fd))
		}
	}
}

// wireValue is a scalar field's value: of its own (from its number and
// name), an enum's last value.
func wireValue(fd protoreflect.FieldDescriptor) protoreflect.Value {
	n := int64(fd.Number()) + 100*int64(len(fd.FullName()))
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(string(fd.FullName()))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32(int32(n))
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(n)
	case protoreflect.Uint64Kind:
		return protoreflect.ValueOfUint64(uint64(n))
	case protoreflect.EnumKind:
		vs := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vs.Get(vs.Len() - 1).Number())
	}
	panic("wireValue: no value for " + fd.Kind().String())
}

// checkSet reports each field of the Go value v, recursively, that is
// its zero.
func checkSet(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	if v.IsZero() {
		t.Errorf("%s is not set from the wire", path)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			return
		}
		for i := range v.NumField() {
			checkSet(t, v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	case reflect.Pointer, reflect.Interface:
		checkSet(t, v.Elem(), path)
	case reflect.Slice:
		for i := range v.Len() {
			checkSet(t, v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	}
}
