package provider

import (
	"context"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/messages"
)

// Outcome is one scripted turn: the deltas to stream, then the message.
type Outcome struct {
	Deltas  []Delta
	Message *messages.AssistantMessage
	// Block makes the stream wait for the caller to cancel (an endless
	// stream); the message is then Aborted.
	Block bool
}

// Scripted replays outcomes in order, per session: each session has its
// own script (or the default one), and each call takes the next outcome;
// past the end it repeats the last one. It records every request.
type Scripted struct {
	mu       sync.Mutex
	def      []Outcome
	sessions map[string][]Outcome
	next     map[string]int
	calls    []Request
	resets   map[string]int
	callback func(Request)
}

// NewScripted returns a provider that plays script for every session.
func NewScripted(script ...Outcome) *Scripted {
	return &Scripted{def: script, sessions: map[string][]Outcome{}, next: map[string]int{}, resets: map[string]int{}}
}

// SetScript gives session its own script.
func (p *Scripted) SetScript(sessionID string, script ...Outcome) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sessions[sessionID] = script
	p.next[sessionID] = 0
}

// SetDefault sets the script of sessions that have none of their own.
func (p *Scripted) SetDefault(script ...Outcome) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.def = script
}

// OnCall registers f to be called with each request before it is answered.
func (p *Scripted) OnCall(f func(Request)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.callback = f
}

// Stream plays the session's next outcome.
func (p *Scripted) Stream(ctx context.Context, req Request, onDelta func(Delta)) *messages.AssistantMessage {
	p.mu.Lock()
	p.calls = append(p.calls, req)
	script, ok := p.sessions[req.SessionID]
	if !ok {
		script = p.def
	}
	i := p.next[req.SessionID]
	p.next[req.SessionID] = i + 1
	cb := p.callback
	p.mu.Unlock()
	if cb != nil {
		cb(req)
	}
	if len(script) == 0 {
		return Failure(0, "scripted provider: no script for session "+req.SessionID, nil)
	}
	out := script[min(i, len(script)-1)]
	for _, d := range out.Deltas {
		if ctx.Err() != nil {
			return Aborted(nil)
		}
		onDelta(d)
	}
	if out.Block {
		<-ctx.Done()
		return Aborted(nil)
	}
	if ctx.Err() != nil {
		return Aborted(nil)
	}
	msg := proto.Clone(out.Message).(*messages.AssistantMessage)
	if msg.GetModel() == "" {
		msg.Model = req.Model
	}
	return msg
}

// ResetSession counts resets per session.
func (p *Scripted) ResetSession(sessionID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resets[sessionID]++
}

// Calls returns the requests received so far.
func (p *Scripted) Calls() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.calls...)
}

// Resets is how many times session was reset.
func (p *Scripted) Resets(sessionID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resets[sessionID]
}
