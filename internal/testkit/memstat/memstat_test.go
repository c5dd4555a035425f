package memstat

import (
	"runtime"
	"testing"
)

func TestInUseCountsHeldMemory(t *testing.T) {
	before := InUse()
	held := make([][]byte, 64)
	for i := range held {
		held[i] = make([]byte, 1<<20)
	}
	after := InUse()
	if after < before+60<<20 {
		t.Errorf("InUse went from %d to %d holding 64 MiB", before, after)
	}
	runtime.KeepAlive(held)
	if ms := Collected(); ms.HeapAlloc > after {
		t.Errorf("Collected's HeapAlloc %d above InUse %d", ms.HeapAlloc, after)
	}
}
