package cluster

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	protocluster "github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
)

// kinds are the cluster kinds the node hosts, built from its config: an
// activation of the shared actors runs actors.CredentialsActor or
// actors.FallbackActor for its identity, and publishes what changed; a
// session's runs Config.Sessions. A client hosts none.
func (m *Member) kinds() []*protocluster.Kind {
	if m.cfg.Client {
		return nil
	}
	creds := actor.PropsFromProducer(func() actor.Actor { return &credentialsActivation{m: m} })
	fallback := actor.PropsFromProducer(func() actor.Actor { return &fallbackActivation{m: m} })
	kinds := []*protocluster.Kind{
		protocluster.NewKind(CredentialsKind, creds),
		protocluster.NewKind(FallbackKind, fallback),
	}
	if m.cfg.Sessions != nil {
		kinds = append(kinds, protocluster.NewKind(SessionKind, m.cfg.Sessions))
	}
	return kinds
}

// publish sends a change to the views actor of every member in the
// current topology, this one included: one remote message per member, in
// order from one activation.
func (m *Member) publish(msg proto.Message) {
	for _, addr := range m.Members() {
		m.system.Root.Send(actor.NewPID(addr, viewsName), msg)
	}
}

// storeTimeout bounds one read or write of Config.Blocks.
const storeTimeout = 2 * time.Second

// restore calls set with every block of kind in scope that Config.Blocks
// holds (nothing without one). A failure is logged: the activation then
// starts from its node's views alone.
func (m *Member) restore(kind pgstore.Kind, scope string, set func(name string, until time.Time)) {
	if m.cfg.Blocks == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	blocked, err := m.cfg.Blocks.Blocked(ctx, kind, scope, time.Now())
	if err != nil {
		m.log.Warn("loading blocks", slog.String("scope", scope), slog.Any("error", err))
		return
	}
	for name, until := range blocked {
		set(name, until)
	}
}

// store writes a change of key's block from old to until (unix ns, 0:
// none) to Config.Blocks: a new or longer block, or an early clear. A
// failure is logged: the block then lives in the nodes' memory only.
func (m *Member) store(key pgstore.BlockKey, old, until int64) {
	if m.cfg.Blocks == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	var err error
	if until != 0 {
		_, err = m.cfg.Blocks.Block(ctx, key, time.Unix(0, until))
	} else if old != 0 {
		_, err = m.cfg.Blocks.Clear(ctx, key, time.Unix(0, old))
	}
	if err != nil {
		m.log.Warn("storing a block", slog.String("key", key.String()), slog.Any("error", err))
	}
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// credentialsActivation is the credentials kind: the provider's
// CredentialsActor, started on activation from the node's config and the
// blocks the node's view knows, publishing its blocks after each change.
// It keeps no overload limiter: each node keeps its own, in its router
// (Provider.Overload).
type credentialsActivation struct {
	m        *Member
	provider Provider
	inner    *actors.CredentialsActor
	view     *actors.CredentialsView
	last     []int64 // the blocks last published
}

func (a *credentialsActivation) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*actor.Started); ok {
		id := protocluster.GetClusterIdentity(ctx).GetIdentity()
		i := slices.IndexFunc(a.m.cfg.Providers, func(p Provider) bool { return p.Name == id })
		if i < 0 { // routers only ask for configured providers
			a.m.log.Error("credentials activation for an unknown provider", slog.String("provider", id))
			ctx.Stop(ctx.Self())
			return
		}
		a.provider, a.view = a.m.cfg.Providers[i], a.m.views.creds[id]
		before := a.blocks()
		a.m.restore(pgstore.CredentialKind, id, func(name string, until time.Time) {
			if cur, _ := a.view.Until(name); until.After(cur) {
				a.view.Set(name, until)
			}
		})
		a.inner = actors.NewCredentialsActor(clock.Real{}, a.provider.Credentials,
			actors.CredentialsPolicy{AutoRedeem: a.provider.AutoRedeem, Budget: a.provider.Budget, Pacing: a.provider.Pacing,
				Refunds: a.provider.Refunds, Provider: a.provider.Name, StickyWait: a.provider.StickyWait}, a.view)
		a.last = before
		a.changed()
		return
	}
	if a.inner == nil {
		return
	}
	a.inner.Receive(ctx)
	a.changed()
}

// changed publishes the keys' blocks and stores the changed ones, if they
// changed since last time.
func (a *credentialsActivation) changed() {
	now := a.blocks()
	if slices.Equal(now, a.last) {
		return
	}
	names := make([]string, len(a.provider.Credentials))
	for i, c := range a.provider.Credentials {
		names[i] = c.Name
		if now[i] != a.last[i] {
			a.m.store(pgstore.CredentialKey(a.provider.Name, c.Name), a.last[i], now[i])
		}
	}
	a.last = now
	a.m.publish(&messages.CredentialBlocks{Provider: a.provider.Name, Names: names, UntilUnixNano: now,
		PublishedUnixNano: time.Now().UnixNano()})
}

// blocks reads the keys' blocked-until times from the view the actor
// publishes to.
func (a *credentialsActivation) blocks() []int64 {
	out := make([]int64, len(a.provider.Credentials))
	for i, c := range a.provider.Credentials {
		if until, _ := a.view.Until(c.Name); !until.IsZero() {
			out[i] = until.UnixNano()
		}
	}
	return out
}

// fallbackActivation is the model-fallback kind: the role's FallbackActor,
// publishing a selector's cooldown when a request changed it.
type fallbackActivation struct {
	m     *Member
	role  string
	inner *actors.FallbackActor
	view  *actors.CooldownView
}

func (a *fallbackActivation) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.role = protocluster.GetClusterIdentity(ctx).GetIdentity()
		chain, ok := a.m.cfg.FallbackChains[a.role]
		if !ok {
			a.m.log.Error("fallback activation for an unknown role", slog.String("role", a.role))
			ctx.Stop(ctx.Self())
			return
		}
		a.view = a.m.views.cooldowns[a.role]
		a.m.restore(pgstore.ModelKind, a.role, func(sel string, until time.Time) {
			if until.After(a.view.Until(sel)) {
				a.view.Set(sel, until)
				a.m.publish(&messages.ModelCooldown{Role: a.role, Selector: sel, UntilUnixNano: until.UnixNano(),
					PublishedUnixNano: time.Now().UnixNano()})
			}
		})
		a.inner = actors.NewFallbackActor(clock.Real{}, a.role, chain, a.view)
	case *protocol.NextModelRequest:
		if a.inner == nil {
			return
		}
		before := a.view.Until(msg.GetCurrent())
		a.inner.Receive(ctx)
		if after := a.view.Until(msg.GetCurrent()); !after.Equal(before) {
			a.m.store(pgstore.ModelKey(a.role, msg.GetCurrent()), unixNano(before), unixNano(after))
			a.m.publish(&messages.ModelCooldown{Role: a.role, Selector: msg.GetCurrent(), UntilUnixNano: after.UnixNano(),
				PublishedUnixNano: time.Now().UnixNano()})
		}
	default:
		if a.inner != nil {
			a.inner.Receive(ctx)
		}
	}
}
