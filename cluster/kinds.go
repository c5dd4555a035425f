package cluster

import (
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	protocluster "github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
)

// kinds are the cluster kinds of the shared actors, built from the node's
// config: an activation runs actors.CredentialsActor or
// actors.FallbackActor for its identity, and publishes what changed.
func (m *Member) kinds() []*protocluster.Kind {
	creds := actor.PropsFromProducer(func() actor.Actor { return &credentialsActivation{m: m} })
	fallback := actor.PropsFromProducer(func() actor.Actor { return &fallbackActivation{m: m} })
	return []*protocluster.Kind{
		protocluster.NewKind(CredentialsKind, creds),
		protocluster.NewKind(FallbackKind, fallback),
	}
}

// publish sends a change to the views actor of every member in the
// current topology, this one included: one remote message per member, in
// order from one activation.
func (m *Member) publish(msg proto.Message) {
	for _, member := range m.cluster.MemberList.Members().Members() {
		m.system.Root.Send(actor.NewPID(member.Address(), viewsName), msg)
	}
}

// credentialsActivation is the credentials kind: the provider's
// CredentialsActor, started on activation from the node's config and the
// blocks the node's view knows, publishing its blocks after each change.
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
		a.inner = actors.NewCredentialsActor(clock.Real{}, a.provider.Credentials, a.provider.AutoRedeem, a.provider.Budget, a.view)
		a.last = a.blocks()
		return
	}
	if a.inner == nil {
		return
	}
	a.inner.Receive(ctx)
	if now := a.blocks(); !slices.Equal(now, a.last) {
		a.last = now
		names := make([]string, len(a.provider.Credentials))
		for i, c := range a.provider.Credentials {
			names[i] = c.Name
		}
		a.m.publish(&messages.CredentialBlocks{Provider: a.provider.Name, Names: names, UntilUnixNano: now,
			PublishedUnixNano: time.Now().UnixNano()})
	}
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
		a.inner = actors.NewFallbackActor(clock.Real{}, a.role, chain, a.view)
	case *messages.NextModelRequest:
		if a.inner == nil {
			return
		}
		before := a.view.Until(msg.GetCurrent())
		a.inner.Receive(ctx)
		if after := a.view.Until(msg.GetCurrent()); !after.Equal(before) {
			a.m.publish(&messages.ModelCooldown{Role: a.role, Selector: msg.GetCurrent(), UntilUnixNano: after.UnixNano(),
				PublishedUnixNano: time.Now().UnixNano()})
		}
	default:
		if a.inner != nil {
			a.inner.Receive(ctx)
		}
	}
}
