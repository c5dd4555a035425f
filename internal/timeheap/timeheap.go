// Package timeheap is a binary min-heap of values by due time, the
// ordering key kept inline in each entry so that ordering reads no value
// (with many entries the values are scattered in memory: reading one per
// comparison would cost a cache miss), and kept by hand rather than through
// container/heap, whose interface boxes every entry. Equal due times come
// out first in, first out.
package timeheap

// Entry is a value with its due time, in any unit the user picks (e.g.
// nanoseconds from an origin).
type Entry[T any] struct {
	Due   int64
	seq   uint64
	Value T
}

// Heap is a min-heap of entries by due time; the zero value is empty. It
// is not safe for concurrent use.
type Heap[T any] struct {
	entries []Entry[T]
	seq     uint64
}

// Len is the number of entries.
func (h *Heap[T]) Len() int { return len(h.entries) }

// Push adds v, due at due.
func (h *Heap[T]) Push(due int64, v T) {
	h.seq++
	h.entries = append(h.entries, Entry[T]{Due: due, seq: h.seq, Value: v})
	h.up(len(h.entries) - 1)
}

// Peek is the earliest entry; the heap is not empty.
func (h *Heap[T]) Peek() Entry[T] { return h.entries[0] }

// Pop removes and returns the earliest entry; the heap is not empty.
func (h *Heap[T]) Pop() Entry[T] {
	e := h.entries[0]
	n := len(h.entries) - 1
	h.entries[0] = h.entries[n]
	h.entries[n] = Entry[T]{}
	h.entries = h.entries[:n]
	h.down(0)
	return e
}

// Keep drops the entries whose value keep rejects, in one pass.
func (h *Heap[T]) Keep(keep func(T) bool) {
	kept := h.entries[:0]
	for _, e := range h.entries {
		if keep(e.Value) {
			kept = append(kept, e)
		}
	}
	clear(h.entries[len(kept):])
	h.entries = kept
	for i := len(kept)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// Clear drops every entry.
func (h *Heap[T]) Clear() {
	clear(h.entries)
	h.entries = h.entries[:0]
}

func (h *Heap[T]) less(i, j int) bool {
	a, b := &h.entries[i], &h.entries[j]
	if a.Due == b.Due {
		return a.seq < b.seq
	}
	return a.Due < b.Due
}

func (h *Heap[T]) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			return
		}
		h.entries[i], h.entries[parent] = h.entries[parent], h.entries[i]
		i = parent
	}
}

func (h *Heap[T]) down(i int) {
	n := len(h.entries)
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < n && h.less(l, least) {
			least = l
		}
		if r < n && h.less(r, least) {
			least = r
		}
		if least == i {
			return
		}
		h.entries[i], h.entries[least] = h.entries[least], h.entries[i]
		i = least
	}
}
