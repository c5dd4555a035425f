package cluster

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	protocluster "github.com/asynkron/protoactor-go/cluster"
)

// Resolver finds the current activation of a shared actor: identity ->
// *actor.PID through protoactor's identity lookup (cluster.Get, disthash),
// cached until the caller reports the PID stale (a request to it failed or
// timed out) or the activation's node leaves the cluster.
type Resolver struct {
	c   *protocluster.Cluster
	mu  sync.Mutex
	pid map[string]*actor.PID // by kind + "/" + identity
}

// NewResolver returns a resolver on c that forgets the PIDs of members
// that leave.
func NewResolver(c *protocluster.Cluster) *Resolver {
	r := &Resolver{c: c, pid: map[string]*actor.PID{}}
	c.ActorSystem.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*protocluster.ClusterTopology); ok {
			for _, left := range t.GetLeft() {
				r.forgetAddress(left.Address())
			}
		}
	})
	return r
}

// Get is the PID of identity's activation of kind, activating it if
// needed; nil when the lookup failed (no member has the kind, or the
// lookup timed out).
func (r *Resolver) Get(kind, identity string) *actor.PID {
	key := kind + "/" + identity
	r.mu.Lock()
	pid := r.pid[key]
	r.mu.Unlock()
	if pid != nil {
		return pid
	}
	pid = r.c.Get(identity, kind)
	if pid != nil {
		r.mu.Lock()
		r.pid[key] = pid
		r.mu.Unlock()
	}
	return pid
}

// Forget drops stale, the cached PID of identity, so the next Get looks it
// up again. A newer PID cached meanwhile stays.
func (r *Resolver) Forget(kind, identity string, stale *actor.PID) {
	key := kind + "/" + identity
	r.mu.Lock()
	defer r.mu.Unlock()
	if pid := r.pid[key]; pid != nil && (stale == nil || pid.Equal(stale)) {
		delete(r.pid, key)
	}
	r.c.PidCache.Remove(identity, kind)
}

func (r *Resolver) forgetAddress(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, pid := range r.pid {
		if pid.GetAddress() == addr {
			delete(r.pid, key)
		}
	}
}
