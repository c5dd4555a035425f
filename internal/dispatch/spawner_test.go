package dispatch

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func TestSpawnerRunsEveryFunctionOnce(t *testing.T) {
	tests := []struct {
		name    string
		maxIdle int
		batches int
		perRun  int
	}{
		{"no reuse", 0, 3, 50},
		{"reuse", 8, 5, 50},
		{"more waiting than asked", 1000, 4, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSpawner(tt.maxIdle)
			defer s.Close()
			var ran atomic.Int64
			for range tt.batches {
				var wg sync.WaitGroup
				wg.Add(tt.perRun)
				for range tt.perRun {
					s.Go(Func(func() { ran.Add(1); wg.Done() }))
				}
				wg.Wait()
			}
			if got, want := ran.Load(), int64(tt.batches*tt.perRun); got != want {
				t.Fatalf("ran %d functions, want %d", got, want)
			}
			s.mu.Lock()
			idle := len(s.idle)
			s.mu.Unlock()
			if idle > tt.maxIdle {
				t.Fatalf("%d goroutines waiting, more than maxIdle %d", idle, tt.maxIdle)
			}
		})
	}
}

func TestSpawnerReusesAFinishedGoroutine(t *testing.T) {
	s := NewSpawner(4)
	defer s.Close()
	done := make(chan struct{})
	s.Go(Func(func() { close(done) }))
	<-done
	for { // the goroutine parks itself after its function returns
		s.mu.Lock()
		n := len(s.idle)
		s.mu.Unlock()
		if n == 1 {
			break
		}
		runtime.Gosched()
	}
	checked, ran := make(chan struct{}), make(chan struct{})
	s.Go(Func(func() { <-checked; close(ran) })) // it waits again only after the check
	s.mu.Lock()
	taken := len(s.idle) == 0 // Go hands the function to the waiting goroutine before it returns
	s.mu.Unlock()
	close(checked)
	<-ran
	if !taken {
		t.Fatal("Go started a new goroutine while one was waiting")
	}
}

func TestSpawnerAfterClose(t *testing.T) {
	s := NewSpawner(4)
	s.Close()
	done := make(chan struct{})
	s.Go(Func(func() { close(done) }))
	<-done
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.idle) != 0 {
		t.Fatalf("a closed spawner keeps %d goroutines waiting", len(s.idle))
	}
}
