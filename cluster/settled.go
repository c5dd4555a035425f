package cluster

import (
	"sync"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
)

// settledLedger keeps, for one handle, the rule that its subscribers are
// told of each prompt's end exactly once (agent_settled), with the true
// outcome, however many activations the prompt's chain went through: an
// activation that took the session over replays the resumed prompt's
// events (some of which a handle may have had from the old one), a
// handle re-attached to a resumed prompt may be told by both, and a
// handle cut off from the activation that settled the prompt hears of its
// end only from the result its attach returns.
type settledLedger struct {
	mu   sync.Mutex
	told map[uint64]chan struct{} // by generation; closed once told
	last uint64                   // the highest generation told
}

// keptGenerations bounds the ledger: generations this far below the last
// one told are forgotten (a prompt's end comes long before that many
// later prompts end).
const keptGenerations = 64

// entry is gen's channel, made if need be; l.mu is held.
func (l *settledLedger) entry(gen uint64) chan struct{} {
	if l.told == nil {
		l.told = map[uint64]chan struct{}{}
	}
	ch, ok := l.told[gen]
	if !ok {
		ch = make(chan struct{})
		l.told[gen] = ch
	}
	return ch
}

// first records that the end of the prompt of generation gen is told, and
// reports whether it was not before.
func (l *settledLedger) first(gen uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := l.entry(gen)
	select {
	case <-ch:
		return false
	default:
	}
	close(ch)
	if gen > l.last {
		l.last = gen
		for g := range l.told {
			if g+keptGenerations < gen {
				delete(l.told, g)
			}
		}
	}
	return true
}

// opened takes the generation of a session opened at a new activation: a
// session opened at rest counts its prompts anew there, so what was told
// of the old activation's generations says nothing of the new one's.
func (l *settledLedger) opened(gen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if gen < l.last {
		l.told, l.last = nil, 0
	}
}

// wait waits at most d for the end of gen's prompt to be told, and
// reports whether it was.
func (l *settledLedger) wait(gen uint64, d time.Duration) bool {
	l.mu.Lock()
	ch := l.entry(gen)
	l.mu.Unlock()
	select {
	case <-ch:
		return true
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// settledEvent is the agent_settled of a prompt's result, for a handle
// whose subscribers were not told by the session itself; its seq is 0
// (the session's events number from 1).
func settledEvent(session string, res *protocol.PromptResult) *messages.SessionEvent {
	return &messages.SessionEvent{SessionId: session, TimeMs: time.Now().UnixMilli(),
		Event: &messages.SessionEvent_AgentSettled{AgentSettled: &messages.AgentSettled{
			Generation: res.GetGeneration(), Success: res.GetError() == "", Error: res.GetError()}}}
}
