package retry

import (
	"math/rand/v2"
	"testing"
)

// A PCGSource draws the sequence of the *rand.Rand it stands in for.
func TestPCGSourceDrawsWhatRandDraws(t *testing.T) {
	for _, seed := range [][2]uint64{{0, 0}, {1, 2}, {42, 21}, {1<<64 - 1, 0x6d757365}} {
		src, want := NewPCGSource(seed[0], seed[1]), rand.New(rand.NewPCG(seed[0], seed[1]))
		for i := range 10000 {
			if g, w := src.Float64(), want.Float64(); g != w {
				t.Fatalf("seeds %v, draw %d: %v, want %v", seed, i, g, w)
			}
		}
	}
}

func BenchmarkSourceFloat64(b *testing.B) {
	for _, bc := range []struct {
		name string
		src  Source
	}{
		{"rand.Rand", rand.New(rand.NewPCG(1, 2))},
		{"PCGSource", NewPCGSource(1, 2)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var sum float64
			for b.Loop() {
				sum += bc.src.Float64()
			}
			if sum < 0 {
				b.Fatal(sum)
			}
		})
	}
}
