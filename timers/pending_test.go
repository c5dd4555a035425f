package timers

import "testing"

func TestPendingTasks(t *testing.T) {
	hashes := []struct {
		name string
		hash func(string) uint64
	}{
		{"by hash", nil}, // the real hash: no collisions among these ids
		{"every id collides", func(string) uint64 { return 7 }},
	}
	for _, h := range hashes {
		t.Run(h.name, func(t *testing.T) {
			p := newPendingTasks()
			if h.hash != nil {
				p.hash = h.hash
			}
			a, b, c := &task{session: "a"}, &task{session: "b"}, &task{session: "c"}
			for _, tk := range []*task{a, b, c} {
				p.put(tk)
			}
			want := func(id string, tk *task) {
				t.Helper()
				if got := p.get(id); got != tk {
					t.Errorf("get(%q) = %v, want %v", id, got, tk)
				}
			}
			want("a", a)
			want("b", b)
			want("c", c)
			want("d", nil)
			if n := p.len(); n != 3 {
				t.Errorf("len = %d, want 3", n)
			}
			p.remove(a) // the one holding the hash, when all collide
			want("a", nil)
			want("b", b)
			a2 := &task{session: "a"}
			p.put(a2)
			want("a", a2)
			p.remove(b)
			p.remove(c)
			want("b", nil)
			want("c", nil)
			want("a", a2)
			if n := p.len(); n != 1 {
				t.Errorf("len = %d, want 1", n)
			}
			p.clear()
			want("a", nil)
			if n := p.len(); n != 0 {
				t.Errorf("len after clear = %d, want 0", n)
			}
		})
	}
}
