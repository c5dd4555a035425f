package cluster

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/overload"
)

// router is a node's local stand-in for one shared actor (a provider's
// credentials, a role's fallback chain): its PID goes where a
// single-machine runtime puts the actor's own (actors.Deps), and it passes
// each message on to the identity's current activation, wherever the
// cluster placed it.
//
// A request (SelectCredential, MarkUsageLimitReached, NextModelRequest,
// RetryBudgetRequest, RetryBudgetStatsRequest) gets RequestTimeout per
// attempt. When an attempt fails (timeout, dead letter: the activation
// moved or its node died), the router forgets the PID, looks the identity
// up again (which activates it elsewhere) and tries again, up to
// RequestAttempts times, pausing between attempts (see pause). Then it answers the degraded reply rather than
// leave the caller waiting, from what the node itself knows: for a usage
// limit, the session's key is marked blocked in the node's view and the
// session switched to the first key the view shows free (as the activation
// would have; none free: no switch, with the time the earliest frees up);
// for a selection, the first key the view shows free; no model switch; a
// budget grant at the requested time (the retry goes ahead unthrottled); a
// paced selection so goes unpaced. A paced selection and a budget
// request name their session as reply_to: the activation's PacingGrant
// and RetryBudgetRelease go there directly, and the router keeps nothing
// of them (the retry budget is the one owner of its holds, see
// retry.Budget); but with the node's overload limiter (overload), a paced
// selection names the router, which keeps the node's places (see
// router_overload.go). Messages with no reply (RetryBudgetOutcome,
// RetryBudgetDrop, ReleaseSession, PacingSettle, PacingCancel,
// PacingObserve) go to the current activation once, and are lost if it
// is gone; the limiter learns from the settles first.
type router struct {
	kind, identity string
	res            lookup
	timeout        time.Duration
	attempts       int
	creds          []string                // the provider's keys, in order (credentials kind)
	view           *actors.CredentialsView // the node's mirror of the keys' blocks (credentials kind)
	overload       *overload.Settings      // the node's overload limiter's settings (credentials kind; nil: none)
	members        func() int              // how many members the node sees (the limiter's start)
	places         *actors.Places          // the node's limiter, from its first paced selection (nil: none yet)
	routed         map[string]routed       // with places: the paced selections passed on, by session
	log            *slog.Logger
}

// lookup finds an identity's activation: a Resolver.
type lookup interface {
	Get(kind, identity string) *actor.PID
	Forget(kind, identity string, stale *actor.PID)
}

func (r *router) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *protocol.SelectCredential:
		r.selectCredential(ctx, m)
	case *protocol.MarkUsageLimitReached, *protocol.NextModelRequest, *protocol.RetryBudgetRequest,
		*protocol.RetryBudgetStatsRequest:
		r.ask(ctx, ctx.Sender(), m.(proto.Message), 1)
	case *protocol.ReleaseSession, *protocol.PacingSettle, *protocol.PacingCancel:
		r.limit(ctx, m.(proto.Message))
		r.tell(ctx, m.(proto.Message))
	case *protocol.RetryBudgetOutcome, *protocol.RetryBudgetDrop, *protocol.PacingObserve:
		r.tell(ctx, m.(proto.Message))
	case *protocol.PacingGrant: // a paced turn's, with places
		r.relay(ctx, m)
	}
}

// ask sends msg to the activation and passes its reply to sender; on a
// failed attempt it looks the activation up again and retries.
func (r *router) ask(ctx actor.Context, sender *actor.PID, msg proto.Message, attempt int) {
	pid := r.res.Get(r.kind, r.identity)
	var f *actor.Future
	if pid != nil {
		f = ctx.RequestFuture(pid, msg, r.timeout)
	} else {
		f = actor.NewFuture(ctx.ActorSystem(), 0) // fails at once: nothing to ask
	}
	ctx.ReenterAfter(f, func(res any, err error) {
		if _, dead := res.(*actor.DeadLetterResponse); err == nil && !dead {
			r.answer(ctx, sender, msg, res)
			return
		}
		r.res.Forget(r.kind, r.identity, pid)
		if attempt < r.attempts {
			pause := actor.NewFuture(ctx.ActorSystem(), r.pause(attempt)) // fails when the pause is over
			ctx.ReenterAfter(pause, func(any, error) { r.ask(ctx, sender, msg, attempt+1) })
			return
		}
		r.log.Warn("shared actor unreachable: answering the degraded reply", slog.String("kind", r.kind),
			slog.String("identity", r.identity), slog.Int("attempts", attempt), slog.Any("error", err))
		r.answer(ctx, sender, msg, r.degraded(msg))
	})
}

// firstPause is the wait after a first failed attempt; it doubles with
// each attempt after that.
const firstPause = 50 * time.Millisecond

// pause is the wait after a failed attempt before the next lookup: the
// cluster's directory learns of a stopped activation a moment after its
// callers get dead letters, and lookups in that moment still answer the
// dead PID. It is never longer than an attempt's timeout.
func (r *router) pause(attempt int) time.Duration {
	return min(firstPause<<(attempt-1), r.timeout)
}

// tell passes a message with no reply to the current activation.
func (r *router) tell(ctx actor.Context, msg proto.Message) {
	if pid := r.res.Get(r.kind, r.identity); pid != nil {
		ctx.Send(pid, msg)
	}
}

func (r *router) reply(ctx actor.Context, to *actor.PID, msg any) {
	if to != nil {
		ctx.Send(to, msg)
	}
}

// degradedUsageLimit blocks the session's key in the node's view and
// switches it to the first key the view shows free.
func (r *router) degradedUsageLimit(m *protocol.MarkUsageLimitReached) *protocol.UsageLimitReply {
	reply := &protocol.UsageLimitReply{Token: m.GetToken()}
	now := time.Now()
	if m.GetCredential() != "" {
		r.view.Set(m.GetCredential(), now.Add(time.Duration(max(m.GetBlockForMs(), 0))*time.Millisecond))
	}
	var earliest time.Time
	for _, c := range r.creds {
		if c == m.GetCredential() {
			continue
		}
		if r.view.Free(c, now) {
			reply.Switched, reply.Credential = true, c
			return reply
		}
		if until, ok := r.view.Until(c); ok && (earliest.IsZero() || until.Before(earliest)) {
			earliest = until
		}
	}
	if !earliest.IsZero() {
		reply.RetryAtMs = earliest.UnixMilli()
	}
	return reply
}

// degraded is the answer to a request the activation never answered.
func (r *router) degraded(msg proto.Message) proto.Message {
	switch m := msg.(type) {
	case *protocol.SelectCredential:
		now := time.Now()
		for _, c := range r.creds {
			if r.view.Free(c, now) {
				return &protocol.CredentialSelected{Credential: c}
			}
		}
		if len(r.creds) > 0 {
			return &protocol.CredentialSelected{Credential: r.creds[0]}
		}
		return &protocol.CredentialSelected{}
	case *protocol.MarkUsageLimitReached:
		return r.degradedUsageLimit(m)
	case *protocol.NextModelRequest:
		return &protocol.NextModelReply{From: m.GetCurrent(), Role: m.GetRole(), Token: m.GetToken()}
	case *protocol.RetryBudgetRequest: // the retry goes ahead unthrottled
		return &protocol.RetryBudgetGrant{Token: m.GetToken(), AtUnixNano: m.GetDueUnixNano(), SessionId: m.GetSessionId()}
	default: // RetryBudgetStatsRequest
		return &protocol.RetryBudgetStats{}
	}
}
