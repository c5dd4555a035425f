package cluster

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/session"
)

// outcomeFromHistory ends a prompt that its session's new activation at
// to does not know by its generation: the session was opened there at
// rest, after the prompt had settled on a node this handle could not hear
// from (cut off, or dropped from the cluster), and counts its prompts anew.
// The session's history, read from that activation, tells how the prompt
// ended (promptOutcome); hostLeft is the error when it does not.
func (p *pendingPrompt) outcomeFromHistory(to *actor.PID, gen uint64, hostLeft error) {
	res, err := p.r.node.rt.System().Root.RequestFuture(to, &protocol.MessagesRequest{History: true},
		p.r.node.member.RequestTimeout()).Result()
	reply, ok := res.(*protocol.MessagesReply)
	if err != nil || !ok || reply.GetError() != "" {
		p.finish(nil, fmt.Errorf("%w; its new activation has no record of it, and its history could not be read", hostLeft))
		return
	}
	if result := promptOutcome(reply.GetEntries(), p.req.GetText(), gen); result != nil {
		p.finish(result, nil)
		return
	}
	p.finish(nil, fmt.Errorf("%w; its new activation has no record of it", hostLeft))
}

// promptOutcome is the result of the prompt text (of generation gen) as a
// history records it: the last assistant message after the prompt's
// entry (the last user entry with its text), an answer or the failure
// that ended it (an interrupted marker among them). It is nil when the
// history holds no such entry, or no assistant message after it.
func promptOutcome(entries []*messages.Entry, text string, gen uint64) *protocol.PromptResult {
	var last *messages.AssistantMessage
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if a := e.GetAssistant(); a != nil && last == nil {
			last = a
		}
		if u := e.GetUser(); u != nil && u.GetText() == text {
			break
		}
		if i == 0 {
			return nil // no entry of the prompt
		}
	}
	switch {
	case last == nil:
		return nil
	case last.GetStopReason() == messages.StopReason_STOP_REASON_ERROR || last.GetStopReason() == messages.StopReason_STOP_REASON_ABORTED:
		return &protocol.PromptResult{Generation: gen, Message: last, ErrorKind: string(session.KindFailed), Error: last.GetErrorMessage()}
	default:
		return &protocol.PromptResult{Generation: gen, Message: last}
	}
}
