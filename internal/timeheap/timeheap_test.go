package timeheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func drain(h *Heap[int]) []int {
	var out []int
	for h.Len() > 0 {
		out = append(out, h.Pop().Value)
	}
	return out
}

func TestHeap(t *testing.T) {
	tests := []struct {
		name string
		due  []int64 // value i is due at due[i]
		keep func(int) bool
		want []int
	}{
		{"empty", nil, nil, nil},
		{"in due order", []int64{30, 10, 20}, nil, []int{1, 2, 0}},
		{"equal due times first in, first out", []int64{5, 5, 1, 5}, nil, []int{2, 0, 1, 3}},
		{"Keep drops the rejected values and keeps the order", []int64{4, 3, 2, 1, 0}, func(v int) bool { return v%2 == 0 }, []int{4, 2, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Heap[int]
			for i, d := range tt.due {
				h.Push(d, i)
			}
			if tt.keep != nil {
				h.Keep(tt.keep)
			}
			if got := drain(&h); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// Random pushes and pops come out as a stable sort by due time would
// have them.
func TestHeapMatchesStableSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Heap[int]
	type item struct {
		due int64
		v   int
	}
	var model []item
	next := 0
	for range 10000 {
		if r.IntN(3) > 0 || len(model) == 0 {
			d := int64(r.IntN(50))
			h.Push(d, next)
			model = append(model, item{d, next})
			next++
			continue
		}
		slices.SortStableFunc(model, func(a, b item) int { return int(a.due - b.due) })
		e := h.Pop()
		if e.Value != model[0].v || e.Due != model[0].due {
			t.Fatalf("popped %d@%d, want %d@%d", e.Value, e.Due, model[0].v, model[0].due)
		}
		model = model[1:]
	}
	if h.Len() != len(model) {
		t.Fatalf("Len %d, want %d", h.Len(), len(model))
	}
	h.Clear()
	if h.Len() != 0 {
		t.Fatalf("Len after Clear %d", h.Len())
	}
}
