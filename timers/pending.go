package timers

import "hash/maphash"

// pendingTasks holds each session's pending task by a hash of its id: a
// lookup compares words, not the id's bytes, which sit on another cache
// line. A task whose id's hash is taken by another session's waits in a
// map by id instead.
type pendingTasks struct {
	hash     func(id string) uint64
	byHash   map[uint64]*task
	collided map[string]*task
}

func newPendingTasks() pendingTasks {
	seed := maphash.MakeSeed()
	return pendingTasks{
		hash:   func(id string) uint64 { return maphash.String(seed, id) },
		byHash: map[uint64]*task{},
	}
}

// get returns the pending task of session id, or nil.
func (p *pendingTasks) get(id string) *task {
	if t := p.byHash[p.hash(id)]; t != nil && t.session == id {
		return t
	}
	return p.collided[id] // nil map: nil
}

// put adds t, whose session has no pending task.
func (p *pendingTasks) put(t *task) {
	t.key = p.hash(t.session)
	if p.byHash[t.key] == nil {
		p.byHash[t.key] = t
		return
	}
	if p.collided == nil {
		p.collided = map[string]*task{}
	}
	p.collided[t.session] = t
}

// remove drops t, pending.
func (p *pendingTasks) remove(t *task) {
	if p.byHash[t.key] == t {
		delete(p.byHash, t.key)
		return
	}
	delete(p.collided, t.session)
}

// len is the number of pending tasks.
func (p *pendingTasks) len() int { return len(p.byHash) + len(p.collided) }

// clear drops every task.
func (p *pendingTasks) clear() {
	clear(p.byHash)
	p.collided = nil
}
