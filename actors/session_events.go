package actors

import (
	"fmt"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/session"
)

// eventPublisher publishes a session's events, in the wire format, to its
// subscribers and the runtime-wide ones, each with the session's next seq.
// It is kept while the session is passivated (the seq goes on).
type eventPublisher struct {
	cfg        *SessionConfig
	deps       *Deps
	seq        uint64
	listening  bool                  // someone subscribes, as the step running found
	promptUser *messages.UserMessage // the prompt running, for its agent_start
	subscribed listenCache           // whether someone subscribes, as last looked
}

// emit publishes one event of the core to the subscribers, in the wire
// format; with none (as the step found), nothing is built (the event's seq
// is still spent). A prompt's agent_start carries the prompt, which the
// actor keeps.
func (p *eventPublisher) emit(ev *session.Event) {
	p.seq++
	if !p.listening {
		return
	}
	out := &messages.SessionEvent{SessionId: p.cfg.ID, Seq: p.seq, TimeMs: p.deps.Clock.Now().UnixMilli()}
	if !ev.Wire(out) {
		panic(fmt.Sprintf("actors: emit of unknown event %v", ev.Kind))
	}
	if ev.Kind == session.EventAgentStart && ev.PromptStart {
		out.GetAgentStart().User = p.promptUser
	}
	p.publish(out)
}

// emitWire publishes one event built by the actor itself (tool
// executions, steering) to the subscribers; set fills in its payload.
func (p *eventPublisher) emitWire(set func(*messages.SessionEvent)) {
	p.seq++
	if !p.listened() {
		return
	}
	ev := &messages.SessionEvent{SessionId: p.cfg.ID, Seq: p.seq, TimeMs: p.deps.Clock.Now().UnixMilli()}
	set(ev)
	p.publish(ev)
}

// listened reports whether anyone subscribes to the session's events, on
// the session or runtime-wide.
func (p *eventPublisher) listened() bool { return p.subscribed.listened() }

// publish gives ev to the session's subscribers and the runtime-wide ones.
func (p *eventPublisher) publish(ev *messages.SessionEvent) {
	p.cfg.Events.Publish(ev)
	if p.cfg.AllEvents != nil {
		p.cfg.AllEvents.Publish(ev)
	}
}
