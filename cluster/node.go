package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/internal/hosting"
)

// clusterNode is a runtime's part in a cluster: its member, and the
// handles of the sessions opened through it (which may be hosted
// anywhere; the sessions it hosts are the runtime's sessions).
type clusterNode struct {
	rt     hosting.Runtime[*musepi.Session]
	cc     JoinConfig
	member *Member
	ready  chan struct{} // closed once the runtime can host sessions

	mu      sync.Mutex
	handles map[string]*remoteSession
	hosts   map[string]*actor.PID // the session kind's activations here, by session id
	leaving context.Context       // Shutdown's, while the node leaves
	done    chan struct{}         // closed by Shutdown
	audit   *time.Timer           // the next auditPrompts
	lease   *time.Timer           // the next checkLease
	stopped bool
}

// auditEvery is how often a node checks its handles' waiting prompts
// against the member list (see remoteSession.audit).
const auditEvery = time.Second

// auditPrompts carries on the prompts whose activation's member left
// (remoteSession.audit), then runs again in auditEvery until shutdown.
func (n *clusterNode) auditPrompts() {
	now, grace := time.Now(), n.leftGrace()
	for _, r := range n.remotes() {
		r.audit(now, grace, n.member.Listed, n.leftGracefully)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.stopped {
		n.audit = time.AfterFunc(auditEvery, n.auditPrompts)
	}
}

// leftGracefully reports whether the membership says a member of ids
// left saying so (a graceful leave, which hands its sessions over); false
// when it cannot tell (the in-process provider of the tests).
func (n *clusterNode) leftGracefully(ids []string) bool {
	left := n.member.leftGracefully
	return left != nil && slices.ContainsFunc(ids, left)
}

// checkLease keeps a hosting node from serving while it cannot hold its
// sessions: every third of the store's lease, a node not sure of its
// lease in the database (pgstore.Store.LeaseSure: its renewals failing,
// the database out of reach) renews it, and if that fails too it steps
// aside from the membership (Member.stepAside). Its sessions act no more
// (their holds answer history.ErrTaken), their handles are told to look
// them up again, and the identity lookup places them on the other nodes,
// which open them once the lease has lapsed by the database's clock: so a
// node cut off from the database loses no prompt, and holds none up
// beyond its lease. The node joins again as a new member (musepi node
// does) once it reaches the database. A process resumed after a pause
// renews at once, and stays.
func (n *clusterNode) checkLease() {
	store := n.cc.Store
	if !store.LeaseSure() {
		ctx, cancel := context.WithTimeout(context.Background(), store.Lease()/3)
		err := store.RenewLease(ctx)
		cancel()
		if err != nil {
			n.member.stepAside(fmt.Sprintf("it cannot renew its lease in the database (%v)", err))
			return
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.stopped {
		n.lease = time.AfterFunc(store.Lease()/3, n.checkLease)
	}
}

// abandonLeaseOnDrop gives the store's lease up as soon as the cluster
// drops the node (pgstore.Store.Abandon): its sessions act no more, and
// the other nodes may open them at once, whatever its leave takes (a
// leave waits on etcd, and on a link that may be cut again).
func (n *clusterNode) abandonLeaseOnDrop() {
	select {
	case <-n.member.Dropped():
	case <-n.done: // a leave of its own, unless it was dropped first
		select {
		case <-n.member.Dropped():
		default:
			return
		}
	}
	store := n.cc.Store
	ctx, cancel := context.WithTimeout(context.Background(), store.Lease()/3)
	defer cancel()
	if err := store.Abandon(ctx); err != nil {
		n.rt.Log().Warn("the dropped node could not give its lease up; its sessions are free once it runs out", slog.Any("error", err))
	}
}

// leftGrace is how long a handle waits for the answers of an activation
// whose member left: a node that leaves gracefully hands its sessions
// over within the handover timeout, and its answers take a request
// timeout more.
func (n *clusterNode) leftGrace() time.Duration {
	return n.cc.HandoverTimeout + n.member.RequestTimeout()
}

// openWait bounds one open of a session at its activation: the new
// activation waits at most the handover timeout and the store's lease for
// the previous holder (sessionHost.openHistory), and a second more.
func (n *clusterNode) openWait() time.Duration {
	return n.cc.HandoverTimeout + n.cc.Store.Lease() + time.Second
}

// attachPatience is how long a prompt whose activation is gone keeps
// looking for the session's new one (see pendingPrompt.attach): a few
// opens, each bounded as openLocked bounds them, long
// enough for a cut-off holder's lease to lapse and a link that flaps to
// settle.
func (n *clusterNode) attachPatience() time.Duration {
	return 4 * (2*n.openWait() + 5*time.Second)
}

// Handle returns the runtime's handle of session req.ID, opening the
// session at its activation.
func (n *clusterNode) Handle(ctx context.Context, req hosting.HandleRequest) (*musepi.Session, error) {
	if req.Steering {
		return nil, fmt.Errorf("musepi: session %s: WithSteering: a Go function cannot reach the node that hosts the session in cluster mode", req.ID)
	}
	if req.Takeover {
		return nil, fmt.Errorf("musepi: session %s: WithTakeover: in cluster mode the hosting node opens the history (and takes it over after JoinConfig.HandoverTimeout)", req.ID)
	}
	if n.rt.Closed() {
		return nil, musepi.ErrRuntimeClosed
	}
	n.mu.Lock()
	if _, dup := n.handles[req.ID]; dup {
		n.mu.Unlock()
		return nil, fmt.Errorf("musepi: session %q is already open on this node", req.ID)
	}
	r := newHandle(n, req)
	n.handles[req.ID] = r
	n.mu.Unlock()
	if err := r.connect(ctx); err != nil {
		n.forget(r)
		r.release()
		return nil, err
	}
	return r.s.Session(), nil
}

// Handles are the sessions of the node's handles.
func (n *clusterNode) Handles() []*musepi.Session {
	var out []*musepi.Session
	for _, r := range n.remotes() {
		out = append(out, r.s.Session())
	}
	return out
}

// HandleOf is the session of the handle of id, if one is open here.
func (n *clusterNode) HandleOf(id string) (*musepi.Session, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r, ok := n.handles[id]
	if !ok {
		return nil, false
	}
	return r.s.Session(), true
}

// Member is the node's membership.
func (n *clusterNode) Member() hosting.Member { return n.member }

// letGo drops the handle r, leaving its session open at its activation.
func (n *clusterNode) letGo(r *remoteSession) {
	r.release()
	n.forget(r)
}

// LetGo drops the handle of session id, if it is open here, leaving the
// session open at its activation.
func (n *clusterNode) LetGo(id string) {
	n.mu.Lock()
	r := n.handles[id]
	n.mu.Unlock()
	if r != nil {
		n.letGo(r)
	}
}

// forget drops the handle r from the node's handles.
func (n *clusterNode) forget(r *remoteSession) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if id := r.s.ID(); n.handles[id] == r {
		delete(n.handles, id)
	}
}

// remotes are the node's handles.
func (n *clusterNode) remotes() []*remoteSession {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*remoteSession, 0, len(n.handles))
	for _, r := range n.handles {
		out = append(out, r)
	}
	return out
}

// Watch has the handles' activations relay events if anyone listens.
func (n *clusterNode) Watch() {
	for _, r := range n.remotes() {
		r.Watch()
	}
}

// left tells the handles whose session was hosted at addr that its node
// left the cluster, and the activations here to drop the handles there.
func (n *clusterNode) left(addr string) {
	for _, r := range n.remotes() {
		r.hostLeft(addr)
	}
	n.mu.Lock()
	hosts := make([]*actor.PID, 0, len(n.hosts))
	for _, pid := range n.hosts {
		hosts = append(hosts, pid)
	}
	n.mu.Unlock()
	for _, pid := range hosts {
		n.rt.System().Root.Send(pid, memberLeft{addr})
	}
}

// hosted records the activation of session id.
func (n *clusterNode) hosted(id string, pid *actor.PID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hosts[id] = pid
}

// unhosted forgets the activation pid of session id.
func (n *clusterNode) unhosted(id string, pid *actor.PID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hosts[id].Equal(pid) {
		delete(n.hosts, id)
	}
}

// isMember reports whether addr is a member of the cluster now, this node
// included.
func (n *clusterNode) isMember(addr string) bool {
	return addr == n.rt.System().Address() || slices.Contains(n.member.Members(), addr)
}

// handoverContext bounds a session's handover: Shutdown's context while
// the node leaves, else HandoverTimeout.
func (n *clusterNode) handoverContext() (context.Context, context.CancelFunc) {
	n.mu.Lock()
	leaving := n.leaving
	n.mu.Unlock()
	if leaving != nil {
		return context.WithTimeout(leaving, n.cc.HandoverTimeout)
	}
	return context.WithTimeout(context.Background(), n.cc.HandoverTimeout)
}

// Shutdown leaves the cluster: the handles let go of their sessions (a
// prompt waiting on one fails with ErrShutdown), the node leaves, and the
// sessions it hosts are handed over (see sessionHost).
func (n *clusterNode) Shutdown(ctx context.Context) error {
	for _, r := range n.remotes() {
		n.letGo(r)
	}
	n.mu.Lock()
	if !n.stopped {
		close(n.done)
	}
	n.leaving, n.stopped = ctx, true
	for _, t := range []*time.Timer{n.audit, n.lease} {
		if t != nil {
			t.Stop()
		}
	}
	n.mu.Unlock()
	if err := n.member.Leave(); err != nil {
		return fmt.Errorf("musepi: leave the cluster: %w", err)
	}
	return nil
}
