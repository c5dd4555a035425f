// Package scheduler runs post-prompt tasks (such as a retry's `continue`)
// after a delay, keyed by session and prompt generation: Queue is the pure
// bookkeeping, Actor executes it on a clock.
package scheduler

import (
	"container/heap"
	"time"
)

// Task is one post-prompt task.
type Task struct {
	Session    string
	Generation uint64
	Name       string // e.g. "continue"
	Due        time.Time

	seq   uint64
	index int
}

// Queue holds pending tasks in due order and the current generation of
// each session. Tasks of a generation older than the session's current one
// are stale and never come out. It is not safe for concurrent use.
type Queue struct {
	tasks      taskHeap
	seq        uint64
	generation map[string]uint64
	bySession  map[string][]*Task // pending tasks per session
}

// NewQueue returns an empty queue.
func NewQueue() *Queue {
	return &Queue{generation: map[string]uint64{}, bySession: map[string][]*Task{}}
}

// Add queues t. A task of a stale generation is dropped at once; Add
// reports whether it was queued.
func (q *Queue) Add(t Task) bool {
	if t.Generation < q.generation[t.Session] {
		return false
	}
	q.SetGeneration(t.Session, t.Generation) // older tasks of the session become stale
	q.seq++
	t.seq = q.seq
	heap.Push(&q.tasks, &t)
	q.bySession[t.Session] = append(q.bySession[t.Session], &t)
	return true
}

// SetGeneration moves session to generation; pending tasks of older
// generations become stale. It returns how many were dropped.
func (q *Queue) SetGeneration(session string, generation uint64) int {
	if generation <= q.generation[session] {
		return 0
	}
	q.generation[session] = generation
	return q.drop(session, func(t *Task) bool { return t.Generation < generation })
}

// Drop removes every pending task of session and forgets it; it returns how
// many were dropped.
func (q *Queue) Drop(session string) int {
	n := q.drop(session, func(*Task) bool { return true })
	delete(q.generation, session)
	return n
}

func (q *Queue) drop(session string, stale func(*Task) bool) int {
	kept := q.bySession[session][:0]
	n := 0
	for _, t := range q.bySession[session] {
		if stale(t) {
			heap.Remove(&q.tasks, t.index)
			n++
			continue
		}
		kept = append(kept, t)
	}
	q.setSessionTasks(session, kept)
	return n
}

func (q *Queue) setSessionTasks(session string, tasks []*Task) {
	if len(tasks) == 0 {
		delete(q.bySession, session)
		return
	}
	q.bySession[session] = tasks
}

// PopDue removes and returns the earliest task due at or before now.
func (q *Queue) PopDue(now time.Time) (Task, bool) {
	if len(q.tasks) == 0 || q.tasks[0].Due.After(now) {
		return Task{}, false
	}
	t := heap.Pop(&q.tasks).(*Task)
	tasks := q.bySession[t.Session]
	for i, other := range tasks {
		if other == t {
			tasks = append(tasks[:i], tasks[i+1:]...)
			break
		}
	}
	q.setSessionTasks(t.Session, tasks)
	return *t, true
}

// Next is the due time of the earliest task, if any.
func (q *Queue) Next() (time.Time, bool) {
	if len(q.tasks) == 0 {
		return time.Time{}, false
	}
	return q.tasks[0].Due, true
}

// Pending is the number of tasks still queued for session.
func (q *Queue) Pending(session string) int { return len(q.bySession[session]) }

// Len is the number of queued tasks.
func (q *Queue) Len() int { return len(q.tasks) }

type taskHeap []*Task

func (h taskHeap) Len() int { return len(h) }
func (h taskHeap) Less(i, j int) bool {
	if h[i].Due.Equal(h[j].Due) {
		return h[i].seq < h[j].seq
	}
	return h[i].Due.Before(h[j].Due)
}
func (h taskHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *taskHeap) Push(x any) {
	t := x.(*Task)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *taskHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
