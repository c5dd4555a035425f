// Package memstat measures the memory a program holds, as the benchmarks
// and the storm harness report it.
//
// It is part of the test kit (internal/testkit): only bench/ (its
// benchmarks and bench/storm) imports it; the runtime measures nothing
// with it.
package memstat

import "runtime"

// Collected returns the memory statistics after two collections (the
// second one frees what the first left for finalizers and pools' victim
// caches).
func Collected() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms
}

// InUse is the heap in use plus goroutine stacks, after two collections:
// what a goroutine per session keeps on its stack counts too.
func InUse() uint64 {
	ms := Collected()
	return ms.HeapAlloc + ms.StackInuse
}
