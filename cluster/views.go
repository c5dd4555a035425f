package cluster

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/messages"
)

// viewsName is the name of every node's views actor, which applies the
// changes that activations send it.
const viewsName = "musepi-views"

// views are a node's mirrors of the shared actors, for its sessions to
// read without a round trip: CredentialsView by provider, CooldownView by
// role. The activations on this node write them directly; the views actor
// applies what activations on other nodes send.
type views struct {
	creds     map[string]*actors.CredentialsView
	cooldowns map[string]*actors.CooldownView
	lag       lag
}

func newViews(cfg Config) *views {
	v := &views{creds: map[string]*actors.CredentialsView{}, cooldowns: map[string]*actors.CooldownView{}}
	for _, p := range cfg.Providers {
		v.creds[p.Name] = actors.NewCredentialsView(p.Credentials)
	}
	for role := range cfg.FallbackChains {
		v.cooldowns[role] = &actors.CooldownView{}
	}
	return v
}

// receive is the views actor: it applies the changes activations send.
func (v *views) receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.CredentialBlocks:
		view := v.creds[m.GetProvider()]
		if view == nil {
			return
		}
		for i, name := range m.GetNames() {
			var until time.Time
			if i < len(m.GetUntilUnixNano()) && m.GetUntilUnixNano()[i] != 0 {
				until = time.Unix(0, m.GetUntilUnixNano()[i])
			}
			view.Set(name, until)
		}
		v.lag.add(m.GetPublishedUnixNano())
	case *messages.ModelCooldown:
		if view := v.cooldowns[m.GetRole()]; view != nil {
			view.Set(m.GetSelector(), time.Unix(0, m.GetUntilUnixNano()))
			v.lag.add(m.GetPublishedUnixNano())
		}
	}
}

// Propagation is how long published changes took to reach a node's views:
// from the activation's publish to the subscriber applying it, on the
// wall clock (meaningful on one machine, or with synchronised clocks).
type Propagation struct {
	Count     int
	Mean, Max time.Duration
}

type lag struct {
	mu       sync.Mutex
	n        int
	sum, max time.Duration
}

func (l *lag) add(publishedNs int64) {
	if publishedNs == 0 {
		return
	}
	d := time.Since(time.Unix(0, publishedNs))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	l.sum += d
	l.max = max(l.max, d)
}

func (l *lag) stats() Propagation {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := Propagation{Count: l.n, Max: l.max}
	if l.n > 0 {
		p.Mean = l.sum / time.Duration(l.n)
	}
	return p
}
