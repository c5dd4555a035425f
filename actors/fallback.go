package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/mailbox"
	"github.com/musepi/musepi/messages/protocol"
)

// FallbackActor holds one role's fallback chain and the cooldowns of model
// selectors, and answers NextModelRequest.
type FallbackActor struct {
	clk      clock.Clock
	role     string
	chain    []string             // "provider/model", in fallback order
	cooldown map[string]time.Time // selector -> end of its cooldown
	view     *CooldownView        // mirrors cooldown (nil: none)
}

// FallbackProps spawns the model-fallback actor of role with its chain;
// view, if not nil, mirrors its cooldowns. opts are added to the props.
func FallbackProps(clk clock.Clock, role string, chain []string, view *CooldownView, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return NewFallbackActor(clk, role, chain, view)
	}, append([]actor.PropsOption{mailbox.Option(clk)}, opts...)...)
}

// NewFallbackActor returns the model-fallback actor FallbackProps spawns,
// for a caller that builds its own props (a cluster kind). Its cooldowns
// start as view holds them (a new activation in a cluster takes over the
// cooldowns its node's view learned).
func NewFallbackActor(clk clock.Clock, role string, chain []string, view *CooldownView) *FallbackActor {
	return &FallbackActor{clk: clk, role: role, chain: append([]string(nil), chain...), cooldown: view.all(), view: view}
}

// Receive answers NextModelRequest.
func (a *FallbackActor) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*protocol.NextModelRequest); ok {
		respond(ctx, a.clk, a.next(m))
	}
}

// next puts the current selector in cooldown (unless pinning) and picks
// the first chain entry after it that is not cooling down.
func (a *FallbackActor) next(m *protocol.NextModelRequest) *protocol.NextModelReply {
	now := a.clk.Now()
	if !m.GetPin() && m.GetCooldownMs() > 0 {
		a.cooldown[m.GetCurrent()] = now.Add(time.Duration(m.GetCooldownMs()) * time.Millisecond)
		a.view.Set(m.GetCurrent(), a.cooldown[m.GetCurrent()])
	}
	reply := &protocol.NextModelReply{From: m.GetCurrent(), Role: a.role, Token: m.GetToken()}
	start := 0
	for i, sel := range a.chain {
		if sel == m.GetCurrent() {
			start = i + 1
			break
		}
	}
	for _, sel := range a.chain[start:] {
		if sel != m.GetCurrent() && sel != m.GetPrimary() && !a.cooldown[sel].After(now) {
			reply.Switched, reply.To = true, sel
			break
		}
	}
	if until, ok := a.cooldown[m.GetPrimary()]; ok && until.After(now) {
		reply.PrimaryCooldownUntilMs = until.UnixMilli()
	}
	if !reply.Switched {
		if back := a.firstBack(m, now); !back.IsZero() {
			reply.NextBackMs = back.UnixMilli()
		}
	}
	return reply
}

// firstBack is when the first of the role's models that m's session
// could use (its primary, the one in use, the chain) comes out of its
// cooldown; zero when one is out of it now.
func (a *FallbackActor) firstBack(m *protocol.NextModelRequest, now time.Time) time.Time {
	var first time.Time
	for _, sel := range append([]string{m.GetPrimary(), m.GetCurrent()}, a.chain...) {
		until := a.cooldown[sel]
		if !until.After(now) {
			return time.Time{}
		}
		if first.IsZero() || until.Before(first) {
			first = until
		}
	}
	return first
}
