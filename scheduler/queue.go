package scheduler

// taskQueue is a min-heap of tasks by due time (container/heap); each task
// knows its index, so a replaced or forgotten one leaves in O(log n).
type taskQueue []*task

func (q taskQueue) Len() int           { return len(q) }
func (q taskQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }

func (q taskQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

// Push is container/heap's; use heap.Push.
func (q *taskQueue) Push(x any) {
	t := x.(*task)
	t.index = len(*q)
	*q = append(*q, t)
}

// Pop is container/heap's; use heap.Pop.
func (q *taskQueue) Pop() any {
	old := *q
	n := len(old) - 1
	t := old[n]
	old[n] = nil
	*q = old[:n]
	t.index = -1
	return t
}
