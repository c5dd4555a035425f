package scheduler_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/musepi/musepi/scheduler"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// task is a task named name of session s and generation gen, due at t0+due.
func task(s string, gen uint64, name string, due time.Duration) scheduler.Task {
	return scheduler.Task{Session: s, Generation: gen, Name: name, Due: t0.Add(due)}
}

// popAll pops every task due by t0+by as "session/gen/name".
func popAll(q *scheduler.Queue, by time.Duration) []string {
	var out []string
	for {
		t, ok := q.PopDue(t0.Add(by))
		if !ok {
			return out
		}
		out = append(out, fmt.Sprintf("%s/%d/%s", t.Session, t.Generation, t.Name))
	}
}

func TestQueuePopDueOrder(t *testing.T) {
	tests := []struct {
		name  string
		tasks []scheduler.Task
		by    time.Duration
		want  []string
	}{
		{"empty", nil, time.Hour, nil},
		{"by due time", []scheduler.Task{task("a", 1, "c", 3*time.Second), task("a", 1, "a", time.Second), task("b", 1, "b", 2*time.Second)},
			time.Hour, []string{"a/1/a", "b/1/b", "a/1/c"}},
		{"ties in insertion order", []scheduler.Task{task("b", 1, "x", time.Second), task("a", 1, "y", time.Second), task("c", 1, "z", time.Second), task("a", 1, "w", 0)},
			time.Hour, []string{"a/1/w", "b/1/x", "a/1/y", "c/1/z"}},
		{"only due ones", []scheduler.Task{task("a", 1, "late", 2*time.Second), task("a", 1, "on-time", time.Second), task("a", 1, "early", 0)},
			time.Second, []string{"a/1/early", "a/1/on-time"}},
		{"nothing due yet", []scheduler.Task{task("a", 1, "x", time.Second)}, time.Second - 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := scheduler.NewQueue()
			for _, task := range tt.tasks {
				if !q.Add(task) {
					t.Fatalf("Add(%v) = false", task)
				}
			}
			if got := popAll(q, tt.by); !slices.Equal(got, tt.want) {
				t.Errorf("popped %v, want %v", got, tt.want)
			}
			if got, want := q.Len(), len(tt.tasks)-len(tt.want); got != want {
				t.Errorf("Len = %d, want %d", got, want)
			}
		})
	}
}

func TestQueuePopDueReturnsTheTask(t *testing.T) {
	q := scheduler.NewQueue()
	in := task("s", 7, "continue", time.Second)
	q.Add(in)
	got, ok := q.PopDue(t0.Add(time.Minute))
	if !ok || got.Session != in.Session || got.Generation != in.Generation || got.Name != in.Name || !got.Due.Equal(in.Due) {
		t.Errorf("PopDue = %+v, %v; want %+v", got, ok, in)
	}
}

func TestQueueAddStaleGeneration(t *testing.T) {
	tests := []struct {
		gen  uint64
		want bool
	}{
		{4, false},
		{0, false},
		{5, true},
		{6, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.gen), func(t *testing.T) {
			q := scheduler.NewQueue()
			q.SetGeneration("s", 5)
			if got := q.Add(task("s", tt.gen, "x", 0)); got != tt.want {
				t.Errorf("Add(gen %d) = %v, want %v", tt.gen, got, tt.want)
			}
			want := 0
			if tt.want {
				want = 1
			}
			if q.Pending("s") != want || q.Len() != want {
				t.Errorf("Pending = %d, Len = %d, want %d", q.Pending("s"), q.Len(), want)
			}
			if !q.Add(task("other", 0, "x", 0)) {
				t.Error("generation of another session affected")
			}
		})
	}
}

func TestQueueAddNewerGenerationMakesOlderTasksStale(t *testing.T) {
	q := scheduler.NewQueue()
	q.Add(task("s", 1, "old", time.Second))
	q.Add(task("s", 2, "new", 2*time.Second))
	if got := q.Pending("s"); got != 1 {
		t.Errorf("Pending = %d, want 1", got)
	}
	if got, want := popAll(q, time.Hour), []string{"s/2/new"}; !slices.Equal(got, want) {
		t.Errorf("popped %v, want %v", got, want)
	}
}

func TestQueueSetGeneration(t *testing.T) {
	tests := []struct {
		name        string
		gen         uint64
		wantDropped int
		wantPending int
	}{
		{"newer drops older tasks", 3, 2, 0},
		{"equal drops nothing", 2, 0, 2},
		{"older drops nothing", 1, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := scheduler.NewQueue()
			q.Add(task("a", 2, "x", time.Second))
			q.Add(task("b", 2, "y", 2*time.Second))
			q.Add(task("a", 2, "z", 3*time.Second))
			if got := q.SetGeneration("a", tt.gen); got != tt.wantDropped {
				t.Errorf("SetGeneration = %d, want %d", got, tt.wantDropped)
			}
			if got := q.Pending("a"); got != tt.wantPending {
				t.Errorf("Pending(a) = %d, want %d", got, tt.wantPending)
			}
			if got := q.Pending("b"); got != 1 {
				t.Errorf("Pending(b) = %d, want 1", got)
			}
			if got, want := q.Len(), tt.wantPending+1; got != want {
				t.Errorf("Len = %d, want %d", got, want)
			}
			if got := q.Add(task("a", 2, "again", 0)); got != (tt.gen <= 2) {
				t.Errorf("Add(gen 2) after SetGeneration(%d) = %v", tt.gen, got)
			}
		})
	}
}

func TestQueueSetGenerationUnknownSession(t *testing.T) {
	q := scheduler.NewQueue()
	if got := q.SetGeneration("new", 1); got != 0 {
		t.Errorf("SetGeneration = %d, want 0", got)
	}
	if q.Add(task("new", 0, "x", 0)) {
		t.Error("Add(gen 0) after SetGeneration(1) = true")
	}
}

func TestQueueDrop(t *testing.T) {
	q := scheduler.NewQueue()
	q.SetGeneration("a", 5)
	q.Add(task("a", 5, "a1", time.Second))
	q.Add(task("b", 1, "b1", 2*time.Second))
	q.Add(task("a", 5, "a2", 3*time.Second))
	q.Add(task("b", 1, "b2", 4*time.Second))

	if got := q.Drop("a"); got != 2 {
		t.Errorf("Drop(a) = %d, want 2", got)
	}
	if got := q.Pending("a"); got != 0 {
		t.Errorf("Pending(a) = %d, want 0", got)
	}
	if got := q.Drop("a"); got != 0 {
		t.Errorf("second Drop(a) = %d, want 0", got)
	}
	if !q.Add(task("a", 1, "fresh", 0)) {
		t.Error("Add(gen 1) after Drop = false; the session's generation should be forgotten")
	}
	if got, want := popAll(q, time.Hour), []string{"a/1/fresh", "b/1/b1", "b/1/b2"}; !slices.Equal(got, want) {
		t.Errorf("popped %v, want %v", got, want)
	}
}

func TestQueuePendingNextLen(t *testing.T) {
	q := scheduler.NewQueue()
	if _, ok := q.Next(); ok {
		t.Error("Next on empty queue reports a task")
	}
	q.Add(task("a", 1, "x", 3*time.Second))
	q.Add(task("b", 1, "y", time.Second))
	q.Add(task("a", 1, "z", 2*time.Second))

	steps := []struct {
		next     time.Duration
		hasNext  bool
		pendingA int
		pendingB int
		len      int
	}{
		{time.Second, true, 2, 1, 3},
		{2 * time.Second, true, 2, 0, 2},
		{3 * time.Second, true, 1, 0, 1},
		{0, false, 0, 0, 0},
	}
	for i, s := range steps {
		next, ok := q.Next()
		if ok != s.hasNext || (ok && !next.Equal(t0.Add(s.next))) {
			t.Errorf("step %d: Next = %v, %v; want t0+%v, %v", i, next.Sub(t0), ok, s.next, s.hasNext)
		}
		if q.Pending("a") != s.pendingA || q.Pending("b") != s.pendingB || q.Len() != s.len {
			t.Errorf("step %d: Pending(a,b) = %d,%d Len = %d; want %d,%d %d",
				i, q.Pending("a"), q.Pending("b"), q.Len(), s.pendingA, s.pendingB, s.len)
		}
		q.PopDue(t0.Add(time.Hour))
	}
}

// Many sessions share one heap; dropping and re-generating some keeps the
// others intact and the due order correct.
func TestQueueManySessionsIndependent(t *testing.T) {
	const sessions, perSession = 20, 5
	q := scheduler.NewQueue()
	for i := range perSession {
		for s := range sessions {
			due := time.Duration((i*sessions+s)*7%97) * time.Second
			q.Add(task(fmt.Sprint("s", s), 1, fmt.Sprint(i), due))
		}
	}
	dropped := 0
	for s := 0; s < sessions; s += 3 {
		dropped += q.SetGeneration(fmt.Sprint("s", s), 2)
	}
	for s := 1; s < sessions; s += 3 {
		dropped += q.Drop(fmt.Sprint("s", s))
	}
	kept := sessions - (sessions+2)/3 - (sessions+1)/3
	if want := (sessions - kept) * perSession; dropped != want {
		t.Errorf("dropped %d, want %d", dropped, want)
	}
	for s := range sessions {
		want := 0
		if s%3 == 2 {
			want = perSession
		}
		if got := q.Pending(fmt.Sprint("s", s)); got != want {
			t.Errorf("Pending(s%d) = %d, want %d", s, got, want)
		}
	}
	if got := q.Len(); got != kept*perSession {
		t.Fatalf("Len = %d, want %d", got, kept*perSession)
	}
	var last time.Time
	for q.Len() > 0 {
		task, ok := q.PopDue(t0.Add(time.Hour))
		if !ok {
			t.Fatal("PopDue = false with tasks queued")
		}
		if task.Due.Before(last) {
			t.Fatalf("popped %v after %v", task.Due.Sub(t0), last.Sub(t0))
		}
		last = task.Due
	}
}
