package retry

import "math/rand/v2"

// PCGSource is a Source over math/rand/v2's PCG generator held by value: one
// small heap object where rand.New(rand.NewPCG(seed1, seed2)) takes two. For
// the same seeds it draws exactly what that *rand.Rand's Float64 draws.
type PCGSource struct{ pcg rand.PCG }

// NewPCGSource returns a PCGSource seeded with seed1 and seed2, as
// rand.NewPCG(seed1, seed2) is.
func NewPCGSource(seed1, seed2 uint64) *PCGSource {
	s := new(PCGSource)
	s.pcg.Seed(seed1, seed2)
	return s
}

// Float64 returns a uniform number in [0, 1), computed from the generator's
// next value as (*rand.Rand).Float64 computes it.
func (s *PCGSource) Float64() float64 { return float64(s.pcg.Uint64()<<11>>11) / (1 << 53) }
