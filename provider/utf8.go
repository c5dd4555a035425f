package provider

import (
	"strings"
	"unicode/utf8"

	"github.com/musepi/musepi/messages"
)

// ValidUTF8 replaces invalid UTF-8 in every text of msg with U+FFFD, in
// place, and returns msg. Providers copy raw response bytes (a proxy's
// Latin-1 error page, a broken stream); protobuf strings must be valid
// UTF-8 or the message cannot be stored or sent on.
func ValidUTF8(msg *messages.AssistantMessage) *messages.AssistantMessage {
	if msg == nil {
		return nil
	}
	fix := func(s *string) {
		if !utf8.ValidString(*s) {
			*s = strings.ToValidUTF8(*s, "\uFFFD")
		}
	}
	for _, b := range msg.GetContent() {
		switch {
		case b.GetText() != nil:
			fix(&b.GetText().Text)
		case b.GetThinking() != nil:
			fix(&b.GetThinking().Thinking)
			fix(&b.GetThinking().Signature)
		case b.GetRedactedThinking() != nil:
			fix(&b.GetRedactedThinking().Data)
		case b.GetToolCall() != nil:
			c := b.GetToolCall()
			fix(&c.Id)
			fix(&c.Name)
			fix(&c.ArgumentsJson)
		}
	}
	fix(&msg.ErrorMessage)
	fix(&msg.Provider)
	fix(&msg.Model)
	fix(&msg.ResponseModel)
	if d := msg.GetStopDetails(); d != nil {
		fix(&d.Type)
		d.Fields = validMap(d.Fields)
	}
	msg.Headers = validMap(msg.Headers)
	return msg
}

func validMap(m map[string]string) map[string]string {
	bad := false
	for k, v := range m {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			bad = true
			break
		}
	}
	if !bad {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[strings.ToValidUTF8(k, "\uFFFD")] = strings.ToValidUTF8(v, "\uFFFD")
	}
	return out
}
