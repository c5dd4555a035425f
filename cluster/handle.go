package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/internal/hosting"
	"github.com/musepi/musepi/internal/reply"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/session"
)

// remoteSession links a Session handle (on any node of a cluster) to its
// session's activation (the session kind), wherever the identity lookup
// placed it. Before the first message to an activation it opens the
// session there (SessionOpen, carrying what the session was created with
// and the handle's relay); a message that finds the activation gone looks
// it up again. The relay receives the session's events (while anyone
// subscribes) and SessionMoved when the activation hands the session over.
type remoteSession struct {
	s     hosting.Handle[*musepi.Session]
	node  *clusterNode
	open  *protocol.SessionOpen
	relay *actor.PID

	// known is pid, for the reads (State), which never wait on mu: an open
	// holds mu while it waits for a new activation (up to openWait).
	known atomic.Pointer[actor.PID]

	mu      sync.Mutex
	pid     *actor.PID // the open activation (nil: look it up)
	events  bool       // the activation relays events to the relay
	pending map[*pendingPrompt]struct{}
	asks    map[*actor.PID]*actor.PID // a request's future -> the activation asked
	gone    bool                      // released: the handle is closed
	settled settledLedger             // the prompts whose end the handle's subscribers were told
	// lost is the host whose loss the subscribers were told of
	// (host_lost), and not yet that the session was reached again ("":
	// none; see hostlost.go).
	lost string

	// resume is, while an open after a host_lost is under way, the
	// address of the activation asked: the subscribers are told resumed
	// once, on its first event or its answer (tellResumed).
	resume atomic.Pointer[string]
}

// newHandle is a handle of session req.ID on node n, not yet connected.
func newHandle(n *clusterNode, req hosting.HandleRequest) *remoteSession {
	r := &remoteSession{node: n, pending: map[*pendingPrompt]struct{}{}, asks: map[*actor.PID]*actor.PID{},
		open: &protocol.SessionOpen{Model: req.Model, Role: req.Role, Settings: req.Settings.Proto(), Priority: int32(req.Priority)}}
	r.s = n.rt.NewHandle(req.ID, req.Model, req.Settings.Enabled, r)
	reg := n.rt.System().ProcessRegistry
	r.relay, _ = reg.Add(&relayProcess{r: r}, "session-relay"+reg.NextId())
	r.open.WatcherAddress, r.open.WatcherId = r.relay.GetAddress(), r.relay.GetId()
	return r
}

// connect opens the session at its activation, until ctx ends.
func (r *remoteSession) connect(ctx context.Context) error {
	return r.deliverContext(ctx, func(*actor.PID) {})
}

// deliver runs send with the open activation, looking it up and opening
// the session there first if need be.
func (r *remoteSession) Deliver(send func(*actor.PID)) error {
	return r.deliverContext(context.Background(), send)
}

// deliverContext is deliver whose lookup and open end with ctx.
func (r *remoteSession) deliverContext(ctx context.Context, send func(*actor.PID)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone {
		return r.s.ClosedError()
	}
	if r.pid == nil {
		if err := r.openLocked(ctx); err != nil {
			return err
		}
	}
	send(r.pid)
	return nil
}

// openLocked finds the activation and opens the session there; r.mu is
// held. A new activation may wait up to the handover timeout and a lease
// for the session's previous one to release its history (openWait);
// lookups and opens that fail (the topology changing, an activation on a
// node that leaves) are tried again until twice that and 5 s more have
// passed.
func (r *remoteSession) openLocked(ctx context.Context) error {
	defer r.resume.Store(nil)
	// One open waits at most for the new activation to take the history
	// over (sessionHost.openHistory: a handover, or a cut-off holder's
	// lease lapsing); a request lost in the mailbox of an activation that
	// was stopping costs one such wait, then the lookup goes again.
	wait := r.node.openWait()
	deadline := time.Now().Add(2*wait + 5*time.Second)
	r.open.Events = r.listening()
	var last error
	for try := 0; try == 0 || time.Now().Before(deadline); try++ {
		if try > 0 { // the topology is changing, or the activation was leaving
			select {
			case <-time.After(min(time.Duration(try)*50*time.Millisecond, 250*time.Millisecond)):
			case <-ctx.Done():
				return fmt.Errorf("musepi: open session %s in the cluster: %w", r.s.ID(), ctx.Err())
			}
		}
		retry, err := r.openOnce(ctx, wait)
		if !retry {
			return err
		}
		last = err
	}
	return fmt.Errorf("musepi: open session %s in the cluster: %w", r.s.ID(), last)
}

// openOnce asks the session's activation, as the resolver knows it, to
// open the session, waiting up to wait; r.mu is held. It reports retry for
// a failure that another lookup may mend (no host yet, a request lost, an
// unexpected reply, the activation forgotten), with err saying why.
func (r *remoteSession) openOnce(ctx context.Context, wait time.Duration) (retry bool, err error) {
	pid := r.node.member.Resolver().Get(SessionKind, r.s.ID())
	if pid == nil {
		return true, errors.New("no member hosts sessions (or the lookup timed out)")
	}
	if r.lost != "" {
		addr := pid.GetAddress()
		r.resume.Store(&addr)
	}
	reply, err := reply.Wait(ctx, r.node.rt.System().Root.RequestFuture(pid, r.open, wait))
	if ctx.Err() != nil {
		return false, fmt.Errorf("musepi: open session %s in the cluster: %w", r.s.ID(), ctx.Err())
	}
	if err != nil {
		r.node.member.Resolver().Forget(SessionKind, r.s.ID(), pid)
		return true, err
	}
	opened, ok := reply.(*protocol.SessionOpened)
	if !ok {
		r.node.member.Resolver().Forget(SessionKind, r.s.ID(), pid)
		return true, fmt.Errorf("unexpected reply %T", reply)
	}
	if e := opened.GetError(); e != "" {
		return false, fmt.Errorf("musepi: open session %s: %s", r.s.ID(), e)
	}
	r.pid, r.events = pid, r.open.Events
	r.known.Store(pid)
	r.reachedLocked()
	if st := opened.GetState(); st != nil {
		r.s.State().SetWire(st)
		r.settled.opened(st.GetGeneration())
	}
	return false, nil
}

// listening reports whether anyone on this node reads the session's
// events: its handle's subscribers or the runtime's.
func (r *remoteSession) listening() bool {
	return r.s.Listening() || r.node.rt.AllEvents().HasSubscribers()
}

// watch makes the activation relay events if anyone listens, and stop if
// nobody does.
func (r *remoteSession) Watch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	on := r.listening()
	if r.pid == nil || r.gone || on == r.events {
		return
	}
	_, err := r.node.rt.System().Root.RequestFuture(r.pid, &protocol.SessionWatch{
		WatcherAddress: r.relay.GetAddress(), WatcherId: r.relay.GetId(), Events: on}, r.node.member.RequestTimeout()).Result()
	if err == nil {
		r.events = on
	}
}

// stale forgets the activation pid (gone, or handed over): the next
// delivery looks the session up again.
func (r *remoteSession) stale(pid *actor.PID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pid != nil && (pid == nil || r.pid.Equal(pid)) {
		r.node.member.Resolver().Forget(SessionKind, r.s.ID(), r.pid)
		r.pid = nil
		r.known.Store(nil)
	}
}

// hostLeft: the member at addr left the cluster. If it hosted the
// session, the next message finds the session's new activation. The
// requests waiting on it get until the handover timeout (and a request
// timeout more) for their reply: a node that leaves gracefully answers
// them; one that died never will, and they go again to the new
// activation. (Prompts wait the same, see audit.)
func (r *remoteSession) hostLeft(addr string) {
	r.mu.Lock()
	pid := r.pid
	r.mu.Unlock()
	if pid == nil || pid.GetAddress() != addr {
		return
	}
	r.stale(pid)
	time.AfterFunc(r.node.leftGrace(), func() { r.redirectAsks(pid) })
}

// asked records that the request of future went to the activation to;
// r.mu is held (in deliver).
func (r *remoteSession) Asked(future, to *actor.PID) { r.asks[future] = to }

// answered forgets the request of future.
func (r *remoteSession) Answered(future *actor.PID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.asks, future)
}

// redirectAsks ends the requests still waiting on the activation from
// (handed over, or gone with its node) with a dead letter, on which
// Session.ask sends them again to the session's new activation.
func (r *remoteSession) redirectAsks(from *actor.PID) {
	r.mu.Lock()
	var futures []*actor.PID
	for f, to := range r.asks {
		if to.Equal(from) {
			futures = append(futures, f)
			delete(r.asks, f)
		}
	}
	r.mu.Unlock()
	for _, f := range futures {
		r.node.rt.System().Root.Send(f, &actor.DeadLetterResponse{Target: from})
	}
}

// moved: the activation from handed the session over. Prompts it had
// not yet taken (still in its mailbox as it stopped) go to the new one.
func (r *remoteSession) moved(from *actor.PID) {
	r.stale(from)
	r.redirectAsks(from)
	r.mu.Lock()
	var again []*pendingPrompt
	for p := range r.pending {
		if p.to.Equal(from) && p.generation() == 0 {
			again = append(again, p)
			delete(r.pending, p)
		}
	}
	r.mu.Unlock()
	for _, p := range again {
		p.mu.Lock()
		reply := p.reply
		p.mu.Unlock()
		r.node.rt.System().ProcessRegistry.Remove(reply)
		if err := p.send(); err != nil {
			p.finish(nil, err)
		}
	}
}

// audit carries on the prompts whose activation's member has left: none
// of the member ids at its address when the prompt went there (its
// incarnations) is listed for grace, in which a node that leaves
// gracefully answers its prompts and one that died never will (its
// answer, or the request itself, may be lost with the connection). Each
// attaches to the session's new activation, which resumed its retry
// chain from its record (see pendingPrompt.attach), or ends with
// musepi.ErrHostLeft when the session had not acknowledged it. listed is
// cluster.Member.Listed; graceful reports whether a member of ids left
// saying so.
//
// The subscribers hear of it (hostlost.go): host_lost at the first audit
// that finds a prompt's member still gone (one audit after it went, so
// that a graceful leave is known for one by then), unless it left
// gracefully; resumed if it is listed again.
func (r *remoteSession) audit(now time.Time, grace time.Duration, listed, graceful func(ids []string) bool) {
	r.mu.Lock()
	var lost []*pendingPrompt
	var told []*messages.SessionEvent
	for p := range r.pending {
		p.mu.Lock()
		addr := p.to.GetAddress()
		switch {
		case listed(p.incarnations):
			if !p.goneSince.IsZero() && r.lost == addr {
				r.lost = ""
				told = append(told, resumedEvent(r.s.ID(), addr))
			}
			p.goneSince = time.Time{}
		case p.goneSince.IsZero():
			p.goneSince = now
		default:
			if r.lost != addr && !graceful(p.incarnations) {
				r.lost = addr
				told = append(told, hostLostEvent(r.s.ID(), addr))
			}
			if now.Sub(p.goneSince) >= grace {
				lost = append(lost, p)
				delete(r.pending, p)
			}
		}
		p.mu.Unlock()
	}
	r.mu.Unlock()
	for _, ev := range told {
		r.publish(ev)
	}
	for _, p := range lost {
		p.lose()
	}
}

// release lets go of the session: the relay stops, and prompts still
// waiting end with ErrShutdown.
func (r *remoteSession) release() {
	r.mu.Lock()
	if r.gone {
		r.mu.Unlock()
		return
	}
	r.gone = true
	pid := r.pid
	r.pid = nil
	r.known.Store(nil)
	pending := r.pending
	r.pending = map[*pendingPrompt]struct{}{}
	r.mu.Unlock()
	if pid != nil && r.events {
		r.node.rt.System().Root.Send(pid, &protocol.SessionWatch{WatcherAddress: r.relay.GetAddress(), WatcherId: r.relay.GetId()})
	}
	r.node.rt.System().ProcessRegistry.Remove(r.relay)
	for p := range pending {
		p.finish(&protocol.PromptResult{ErrorKind: string(session.KindShutdown), Error: actors.ShutdownError}, nil)
		p.mu.Lock()
		reply := p.reply
		p.mu.Unlock()
		r.node.rt.System().ProcessRegistry.Remove(reply)
	}
}

// close closes the session at its activation and releases the handle.
// The close goes as any request does (Session.ask): a handle that has lost
// track of its activation (its host left, the session moved) finds it
// again, since the activation holds the session's history until it is
// closed. It waits at most for one hand-over and a request more. Closing a
// released handle does nothing.
func (r *remoteSession) Close(ctx context.Context) error {
	defer r.node.forget(r)
	r.mu.Lock()
	gone := r.gone
	r.mu.Unlock()
	if gone {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.node.cc.HandoverTimeout+r.node.member.RequestTimeout())
	defer cancel()
	_, err := r.s.Ask(ctx, &protocol.SessionClose{})
	r.release()
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) { // ask names the session in its other errors
		return fmt.Errorf("musepi: close session %s: %w", r.s.ID(), err)
	}
	return err
}

// State refreshes the handle's mirror of the session's state from the
// activation the handle knows (bounded by the cluster's request timeout;
// on failure the mirror keeps what it last knew), without waiting for an
// open in progress. A read never places the
// session: a handle that knows no activation (its host left the member
// list, the session moved) answers from its mirror, and only a prompt or
// an explicit open looks the session up again. Reopening it elsewhere for
// a read would move a session whose host is alive, and make the new
// activation wait for that host's lease.
func (r *remoteSession) State() *actors.SessionState {
	pid := r.known.Load()
	if pid == nil {
		return r.s.State()
	}
	res, err := r.node.rt.System().Root.RequestFuture(pid, &protocol.SessionStateRequest{}, r.node.member.RequestTimeout()).Result()
	if w, ok := res.(*protocol.SessionStateReply); ok && err == nil {
		r.s.State().SetWire(w)
	}
	return r.s.State()
}

// pendingPrompt is a prompt sent to the session's activation and not yet
// answered.
type pendingPrompt struct {
	r      *remoteSession
	req    *protocol.PromptRequest
	caller reply.Replier // takes the result, and the PromptAccepted

	mu           sync.Mutex
	to           *actor.PID // the activation it went to
	incarnations []string   // the ids of the members at to's address then
	goneSince    time.Time  // when audit first found none of them listed
	reply        *actor.PID
	gen          uint64 // from PromptAccepted (0: not yet accepted)
	tries        int
	lost         bool      // its activation is gone, the reply with it
	attaching    bool      // waiting on an AttachPrompt to the new activation
	attachUntil  time.Time // when attaching gives up (zero: not attached yet)
	once         sync.Once
}

// prompt sends req to the session's activation; p gets the reply as
// from a reply address of this runtime. A prompt that reaches no session
// (the activation was gone: a dead letter) is sent again to the new one;
// one whose node leaves while it waits ends with musepi.ErrHostLeft.
func (r *remoteSession) Prompt(req *protocol.PromptRequest, p hosting.Prompt) {
	req.Ack = true // the generation tells which prompt a handover orphaned
	pending := &pendingPrompt{r: r, req: req, caller: p}
	if err := pending.send(); err != nil {
		p.Replied(nil, err)
	}
}

// again forgets the activation to, which answered a request with a dead
// letter (it was gone): the request goes again, and finds the new one.
func (r *remoteSession) Again(to *actor.PID) bool {
	r.stale(to)
	return true
}

// isClosed reports whether the handle was released.
func (r *remoteSession) IsClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gone
}

// closeHere releases the handle of a session handed over: it goes on
// where it is opened next.
func (r *remoteSession) CloseHere(context.Context) error {
	r.node.letGo(r)
	return nil
}

func (p *pendingPrompt) send() error {
	p.mu.Lock()
	p.tries++
	p.mu.Unlock()
	reply := reply.New(p.r.node.rt.System(), p)
	err := p.r.Deliver(func(pid *actor.PID) {
		p.sentTo(pid, reply)
		p.r.node.rt.System().Root.RequestWithCustomSender(pid, p.req, reply)
	})
	if err != nil {
		p.r.node.rt.System().Root.Stop(reply)
	}
	return err
}

// sentTo records that the prompt (or its attach) goes to the activation
// pid, answered at reply; r.mu is held (in deliver).
func (p *pendingPrompt) sentTo(pid, reply *actor.PID) {
	p.mu.Lock()
	p.to, p.reply = pid, reply
	p.incarnations, p.goneSince = p.r.node.member.Incarnations(pid.GetAddress()), time.Time{}
	p.mu.Unlock()
	p.r.pending[p] = struct{}{}
}

func (p *pendingPrompt) AcceptedAt(gen uint64) {
	p.mu.Lock()
	p.gen = gen
	p.mu.Unlock()
	p.caller.AcceptedAt(gen)
}

func (p *pendingPrompt) generation() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

// replied takes the reply address's result: a dead letter before the
// session took the prompt means it reached no session, and it goes again;
// a prompt whose activation is gone attaches to the new one.
func (p *pendingPrompt) Replied(res interface{}, err error) {
	p.mu.Lock()
	lost, attaching, to, gen, tries, attachUntil := p.lost, p.attaching, p.to, p.gen, p.tries, p.attachUntil
	p.mu.Unlock()
	r := p.r
	r.mu.Lock()
	delete(r.pending, p)
	r.mu.Unlock()
	deadLetter := errors.Is(err, reply.ErrNoSession)
	if handedOver(res) { // the session moved with the prompt waiting in a backoff
		lost, gen = true, max(gen, res.(*protocol.PromptResult).GetGeneration())
		p.mu.Lock()
		p.gen = gen
		p.mu.Unlock()
	}
	hostLeft := fmt.Errorf("%w (its activation at %s)", musepi.ErrHostLeft, to.GetAddress())
	switch {
	case (lost || attaching && deadLetter) && gen != 0 && (tries < hosting.OpenAttempts || time.Now().Before(attachUntil)):
		r.stale(to)
		// Not on the goroutine that delivered the reply: that may be the
		// remote's reader from the node the new open must hear from.
		go p.attach()
	case lost:
		p.finish(nil, hostLeft)
	case attaching && isNoPrompt(res):
		go p.outcomeFromHistory(to, gen, hostLeft)
	case deadLetter && gen == 0 && tries < hosting.OpenAttempts:
		r.stale(to)
		go func() {
			if serr := p.send(); serr != nil {
				p.finish(nil, serr)
			}
		}()
	default:
		p.finish(res, err)
	}
}

// attach asks the session's new activation for the result of the prompt
// (AttachPrompt): its node resumed the prompt's retry chain from the
// session's record, and answers once the prompt settles. An open that
// fails (the node the lookup chose is cut off, or leaving, or cannot
// reach the database) is not the prompt's result, since its chain may
// live on elsewhere: the handle looks the session up again, every
// attachPause, until attachPatience has passed since the first attach.
func (p *pendingPrompt) attach() {
	p.mu.Lock()
	p.tries++
	p.lost, p.attaching = false, true
	if p.attachUntil.IsZero() {
		p.attachUntil = time.Now().Add(p.r.node.attachPatience())
	}
	gen, gaveUp, until := p.gen, p.reply, p.attachUntil
	p.mu.Unlock()
	reply := reply.New(p.r.node.rt.System(), p)
	err := p.r.Deliver(func(pid *actor.PID) {
		p.sentTo(pid, reply)
		p.r.node.rt.System().Root.RequestWithCustomSender(pid, &protocol.AttachPrompt{Generation: gen,
			ReplacesAddress: gaveUp.GetAddress(), ReplacesId: gaveUp.GetId()}, reply)
	})
	if err == nil {
		return
	}
	p.r.node.rt.System().Root.Stop(reply)
	if p.r.IsClosed() || time.Now().Add(attachPause).After(until) {
		p.finish(nil, fmt.Errorf("%w: its chain was not found within %s: %w", musepi.ErrHostLeft, p.r.node.attachPatience(), err))
		return
	}
	p.r.node.rt.Log().Warn("the prompt's session could not be opened to attach to it; looking it up again",
		slog.Any("error", err), slog.String("session", p.r.s.ID()), slog.Uint64("generation", gen))
	time.AfterFunc(attachPause, p.attach)
}

// attachPause is how long a prompt waits between two attempts to attach
// to its session's activation.
const attachPause = time.Second

// handedOver reports whether res is the answer of a session handed over
// with its prompt waiting in a backoff: the prompt goes on where the
// session is opened next.
func handedOver(res interface{}) bool {
	r, ok := res.(*protocol.PromptResult)
	return ok && r.GetErrorKind() == string(session.KindHandedOver)
}

// promptEnd reports whether res (nil: none) may be the end of the prompt
// it answers, rather than a refusal that says nothing of it: the session
// busy with another prompt, another caller attached, no such prompt, or
// handed over.
func promptEnd(res *protocol.PromptResult) bool {
	switch session.ErrorKind(res.GetErrorKind()) {
	case session.KindBusy, session.KindNoPrompt, session.KindHandedOver:
		return false
	}
	return true
}

// isNoPrompt reports whether res is the answer of an AttachPrompt that
// found no prompt to attach to.
func isNoPrompt(res interface{}) bool {
	r, ok := res.(*protocol.PromptResult)
	return ok && r.GetErrorKind() == string(session.KindNoPrompt)
}

// lose ends the prompt: its activation is gone with it.
func (p *pendingPrompt) lose() {
	p.mu.Lock()
	p.lost = true
	reply := p.reply
	p.mu.Unlock()
	p.r.node.rt.System().Root.Stop(reply) // replied, with lost set
}

// finish gives the prompt's caller its result, once. The handle's
// subscribers are told of the prompt's end exactly once (see
// settledLedger): by the session's own agent_settled when it arrives
// within a request timeout of the result, else by one the handle makes
// from the result (the activation that settled it could not reach this
// node, or its events went to a handle that was gone). A prompt that ends
// here with an error of the handle's own (never accepted, or lost with its
// host) is told by the caller (musepi rpc writes its agent_settled), and
// a later agent_settled for it is dropped.
func (p *pendingPrompt) finish(res interface{}, err error) {
	p.once.Do(func() {
		result, _ := res.(*protocol.PromptResult)
		gen := max(p.generation(), result.GetGeneration())
		switch {
		case gen == 0 || !promptEnd(result):
			p.caller.Replied(res, err)
		case err != nil || result == nil:
			p.r.settled.first(gen)
			p.caller.Replied(res, err)
		default:
			// Not on the goroutine that delivered the result: that may be
			// the remote's reader, which also delivers the events.
			go func() {
				p.r.tellSettled(result)
				p.caller.Replied(res, err)
			}()
		}
	})
}

// publish gives a session event to the handle's subscribers and its
// runtime's.
func (r *remoteSession) publish(ev *messages.SessionEvent) {
	r.s.Publish(ev)
	r.node.rt.AllEvents().Publish(ev)
}

// tellSettled makes sure the handle's subscribers are told of the end of
// res's prompt: the activation relays the session's agent_settled, which
// may come a moment after the result; without it within a request
// timeout (or with no events relayed), the handle tells them itself.
func (r *remoteSession) tellSettled(res *protocol.PromptResult) {
	gen := res.GetGeneration()
	r.mu.Lock()
	relayed := r.events
	r.mu.Unlock()
	if relayed && r.settled.wait(gen, r.node.member.RequestTimeout()) {
		return
	}
	if r.settled.first(gen) {
		r.publish(settledEvent(r.s.ID(), res))
	}
}

// relayProcess is a handle's address for its activation: the session's
// events, and SessionMoved.
type relayProcess struct{ r *remoteSession }

// SendUserMessage takes an event or a SessionMoved.
func (p *relayProcess) SendUserMessage(_ *actor.PID, message interface{}) {
	_, msg, sender := actor.UnwrapEnvelope(message)
	switch m := msg.(type) {
	case *messages.SessionEvent:
		if end := m.GetAgentSettled(); end != nil && !p.r.settled.first(end.GetGeneration()) {
			return // its subscribers were told already (by another activation, or by the handle)
		}
		p.r.tellResumed() // before the first event of the activation an open after a host_lost reached
		p.r.publish(m)
	case *protocol.SessionMoved:
		// Not on the remote's reader: moving on may open the session
		// elsewhere, and wait for replies this reader delivers.
		go p.r.moved(sender)
	}
}

// SendSystemMessage is ignored: the relay watches nothing.
func (p *relayProcess) SendSystemMessage(*actor.PID, interface{}) {}

// Stop is a no-op: the handle removes its relay when it is released.
func (p *relayProcess) Stop(*actor.PID) {}
