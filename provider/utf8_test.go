package provider

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/musepi/musepi/messages"
)

// A message with raw invalid bytes anywhere becomes storable, and valid
// text is left as it is.
func TestValidUTF8(t *testing.T) {
	bad := "a\xffb"
	msg := &messages.AssistantMessage{
		Content: []*messages.ContentBlock{
			{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: bad}}},
			{Block: &messages.ContentBlock_Thinking{Thinking: &messages.ThinkingBlock{Thinking: bad, Signature: bad}}},
			{Block: &messages.ContentBlock_RedactedThinking{RedactedThinking: &messages.RedactedThinkingBlock{Data: bad}}},
			{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: bad, Name: bad, ArgumentsJson: bad}}},
		},
		ErrorMessage:  "502 Bad Gateway: bad \xff gateway",
		StopDetails:   &messages.StopDetails{Type: bad, Fields: map[string]string{bad: bad}},
		Headers:       map[string]string{"x": bad},
		Model:         "ok",
		ResponseModel: bad,
	}
	if _, err := protojson.Marshal(ValidUTF8(msg)); err != nil {
		t.Fatalf("still not storable: %v", err)
	}
	if got := msg.GetContent()[0].GetText().GetText(); got != "a\uFFFDb" {
		t.Fatalf("text = %q", got)
	}
	if msg.GetModel() != "ok" || ValidUTF8(nil) != nil {
		t.Fatal("valid text must stay as it is, and nil stays nil")
	}
}
