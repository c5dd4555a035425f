package main

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/musepi/musepi"
)

// limitPeriod is how often the limiter's limit is read over a run.
const limitPeriod = 100 * time.Millisecond

// limitSample is the limiter's limit at a moment of the run: the limit of
// each node (one runtime: one), and their sum.
type limitSample struct {
	at    time.Duration // from the start of the run
	limit int           // the nodes' limits summed
	nodes []int         // each node's
}

// limitFigures are the figures of the limit sampled over a run (on a
// cluster, the nodes' limits summed): its lowest (limit_min) and the time
// from the capacity's return to the first sample at 90 % of it or more
// (limit_recovery_s; left out when the limit never got there after the
// return).
func limitFigures(c *ovCapacity, samples []limitSample) map[string]float64 {
	f := map[string]float64{}
	if len(samples) == 0 {
		return f
	}
	lowest := samples[0].limit
	for _, s := range samples {
		lowest = min(lowest, s.limit)
	}
	f["limit_min"] = float64(lowest)
	for _, s := range samples {
		if s.at >= c.returnAt() && float64(s.limit) >= 0.9*float64(c.High) {
			f["limit_recovery_s"] = (s.at - c.returnAt()).Seconds()
			break
		}
	}
	return f
}

// The convergence of the limits in the low window: settled from a sixth
// of the window after the drop (10 s of the 60 s) to the
// capacity's return, the nodes' limits summed stay within limitBand of the
// low capacity (between half of it and one and a half times it) in at
// least convergedShare of the readings.
const (
	limitBand      = 0.5
	convergedShare = 0.9
)

// settled is the part of the low window the convergence figures read:
// from a sixth of the window after the drop to the capacity's return.
func (c *ovCapacity) settled() (from, to time.Duration) {
	return c.LowStart + c.LowFor/6, c.returnAt()
}

// convergenceFigures say whether the nodes' limits (one runtime: its
// limit) converge on the low capacity without oscillating, over the
// settled part of the low window: the sum's mean, lowest and highest
// (limit_sum_low_*), the share of readings with the sum within the band
// (limit_sum_in_band) and whether that share is at least convergedShare
// (limit_converged, 1 or 0); the decreases of each node's limit between
// one reading and the next (limit_decreases_node_N, and the most of one
// node, limit_decreases_max: several decreases within 100 ms count once);
// and how evenly the nodes share the capacity (limit_node_mean_spread:
// the highest node's mean limit over the lowest's). None without a
// reading there.
func convergenceFigures(c *ovCapacity, samples []limitSample) map[string]float64 {
	from, to := c.settled()
	var in []limitSample
	for _, s := range samples {
		if s.at >= from && s.at < to {
			in = append(in, s)
		}
	}
	f := map[string]float64{}
	if len(in) == 0 {
		return f
	}
	lo, hi := (1-limitBand)*float64(c.Low), (1+limitBand)*float64(c.Low)
	lowest, highest, sum, inBand := in[0].limit, in[0].limit, 0, 0
	for _, s := range in {
		lowest, highest, sum = min(lowest, s.limit), max(highest, s.limit), sum+s.limit
		if v := float64(s.limit); v >= lo && v <= hi {
			inBand++
		}
	}
	f["limit_sum_low_mean"] = float64(sum) / float64(len(in))
	f["limit_sum_low_min"], f["limit_sum_low_max"] = float64(lowest), float64(highest)
	f["limit_sum_in_band"] = float64(inBand) / float64(len(in))
	f["limit_converged"] = 0
	if f["limit_sum_in_band"] >= convergedShare {
		f["limit_converged"] = 1
	}
	nodeFigures(f, in)
	return f
}

// nodeFigures are each node's decreases and the spread of the nodes'
// mean limits over the readings in.
func nodeFigures(f map[string]float64, in []limitSample) {
	n := len(in[0].nodes)
	decreases, means := make([]int, n), make([]float64, n)
	for i, s := range in {
		for node, limit := range s.nodes {
			means[node] += float64(limit) / float64(len(in))
			if i > 0 && limit < in[i-1].nodes[node] {
				decreases[node]++
			}
		}
	}
	for node, d := range decreases {
		f[fmt.Sprintf("limit_decreases_node_%d", node+1)] = float64(d)
	}
	f["limit_decreases_max"] = float64(slices.Max(decreases))
	if lowest := slices.Min(means); lowest > 0 {
		f["limit_node_mean_spread"] = slices.Max(means) / lowest
	}
}

// LimitTimeline is the overload limiter's limit of the storm's model on
// each node of a contender (one runtime: one node), read every PeriodMs
// with Runtime.ConcurrencyLimit from the start of the run: at AtMs[i],
// node n's limit was Nodes[n][i]. Readings start once every node has a
// limit (its first turn asked for a place).
type LimitTimeline struct {
	PeriodMs int     `json:"period_ms"`
	AtMs     []int64 `json:"at_ms"`
	Nodes    [][]int `json:"nodes"`
}

// limitTimeline is samples as a LimitTimeline; nil without samples.
func limitTimeline(samples []limitSample) *LimitTimeline {
	if len(samples) == 0 {
		return nil
	}
	t := &LimitTimeline{PeriodMs: int(limitPeriod.Milliseconds()), Nodes: make([][]int, len(samples[0].nodes))}
	for _, s := range samples {
		t.AtMs = append(t.AtMs, s.at.Milliseconds())
		for n, limit := range s.nodes {
			t.Nodes[n] = append(t.Nodes[n], limit)
		}
	}
	return t
}

// limitSampler reads runtimes' overload limit of a model at a steady pace
// until stopped.
type limitSampler struct {
	mu    sync.Mutex
	start time.Time
	got   []limitSample
	done  chan struct{}
	ended chan struct{}
}

// sampleLimits reads the limit of model on each of rts every period from
// now on, once all have one.
func sampleLimits(rts []*musepi.Runtime, model string, period time.Duration) *limitSampler {
	s := &limitSampler{start: time.Now(), done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(s.ended)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-s.done:
				return
			case now := <-tick.C:
				s.read(now, rts, model)
			}
		}
	}()
	return s
}

// read takes one reading at now, if every runtime has a limit.
func (s *limitSampler) read(now time.Time, rts []*musepi.Runtime, model string) {
	sample := limitSample{at: now.Sub(s.start), nodes: make([]int, len(rts))}
	for i, rt := range rts {
		n, ok := rt.ConcurrencyLimit(model)
		if !ok {
			return
		}
		sample.nodes[i], sample.limit = n, sample.limit+n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, sample)
}

// samples are the readings so far; none from a nil sampler.
func (s *limitSampler) samples() []limitSample {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// stop ends the readings; a nil sampler has none.
func (s *limitSampler) stop() {
	if s == nil {
		return
	}
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	<-s.ended
}
