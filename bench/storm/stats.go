package main

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bubblesprogress "github.com/charmbracelet/bubbles/progress"
	"github.com/muesli/termenv"
)

// lockstepBucket is the bucket width of the lockstep index.
const lockstepBucket = 10 * time.Millisecond

// percentiles returns the nearest-rank p50 and p99 and the maximum of ds,
// or zeros when ds is empty. ds is not modified.
func percentiles(ds []time.Duration) (p50, p99, max time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p int) time.Duration { // nearest rank: ceil(p/100 * n)
		return s[(p*len(s)+99)/100-1]
	}
	return rank(50), rank(99), s[len(s)-1]
}

// lockstepIndex measures how bunched up one wave of retry attempts is: the
// largest count of attempts (times from the start of the run) in any 10 ms
// bucket, divided by the mean count per 10 ms over the wave's jitter
// window. Attempts spread evenly over the window give about 1.0; all in
// one bucket give window/10ms. It is 0 for no attempts.
func lockstepIndex(times []time.Duration, window time.Duration) float64 {
	if len(times) == 0 {
		return 0
	}
	counts := make(map[time.Duration]int)
	peak := 0
	for _, t := range times {
		b := t / lockstepBucket
		if t < 0 && t%lockstepBucket != 0 {
			b-- // floor, so buckets stay aligned before the start too
		}
		counts[b]++
		peak = max(peak, counts[b])
	}
	buckets := max(1, float64(window)/float64(lockstepBucket))
	return float64(peak) / (float64(len(times)) / buckets)
}

// recorder collects the events of one system's run. It is safe for
// concurrent use; make one with newRecorder. Times are kept as offsets
// from the start, eight bytes an event.
type recorder struct {
	start time.Time

	mu          sync.Mutex
	requests    []time.Duration
	completions []time.Duration
	late        []time.Duration // every backoff wake-up's lateness
	lateFirst   []time.Duration // the first wave's only
}

// restart makes now the start of the run, before any request.
func (r *recorder) restart(now time.Time) {
	r.mu.Lock()
	r.start = now
	r.mu.Unlock()
}

// newRecorder returns a recorder for a run that started at start.
func newRecorder(start time.Time) *recorder {
	return &recorder{start: start}
}

// request records a provider request sent at at.
func (r *recorder) request(at time.Time) {
	d := at.Sub(r.start)
	r.mu.Lock()
	r.requests = append(r.requests, d)
	r.mu.Unlock()
}

// completion records a prompt completed at at.
func (r *recorder) completion(at time.Time) {
	d := at.Sub(r.start)
	r.mu.Lock()
	r.completions = append(r.completions, d)
	r.mu.Unlock()
}

// lateness records how late a backoff wake-up was, and whether it woke a
// retry of the first wave.
func (r *recorder) lateness(d time.Duration, firstWave bool) {
	r.mu.Lock()
	r.late = append(r.late, d)
	if firstWave {
		r.lateFirst = append(r.lateFirst, d)
	}
	r.mu.Unlock()
}

// timeline counts the requests and completions per bucket from the start
// (events before the start count in bucket 0). bucket must be positive.
func (r *recorder) timeline(bucket time.Duration) *Timeline {
	r.mu.Lock()
	defer r.mu.Unlock()
	index := func(d time.Duration) int { return int(max(0, d) / bucket) }
	n := 0
	for _, ds := range [][]time.Duration{r.requests, r.completions} {
		for _, d := range ds {
			n = max(n, index(d)+1)
		}
	}
	t := &Timeline{
		BucketMs:    int(bucket / time.Millisecond),
		Requests:    make([]int, n),
		Completions: make([]int, n),
	}
	for _, d := range r.requests {
		t.Requests[index(d)]++
	}
	for _, d := range r.completions {
		t.Completions[index(d)]++
	}
	return t
}

// requestsBetween counts the requests sent at or after from and before to.
func (r *recorder) requestsBetween(from, to time.Time) int {
	lo, hi := from.Sub(r.start), to.Sub(r.start)
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, d := range r.requests {
		if d >= lo && d < hi {
			n++
		}
	}
	return n
}

// latenessFigures returns the p50, p99 and max lateness of all backoff
// wake-ups and of the first wave's.
func (r *recorder) latenessFigures() (all, firstWave [3]time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	all[0], all[1], all[2] = percentiles(r.late)
	firstWave[0], firstWave[1], firstWave[2] = percentiles(r.lateFirst)
	return all, firstWave
}

// latenessCounts is how many wake-ups were measured, in all and in the
// first wave.
func (r *recorder) latenessCounts() (all, firstWave int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.late), len(r.lateFirst)
}

// lastCompletion returns the time of the latest completion, or the zero
// time when there was none.
func (r *recorder) lastCompletion() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.completions) == 0 {
		return time.Time{}
	}
	return r.start.Add(slices.Max(r.completions))
}

// progressEvery is how often a started progress line is redrawn.
const progressEvery = 200 * time.Millisecond

// progressWidth is the number of cells in the progress bar.
const progressWidth = 30

// progress draws a one-line progress bar on a terminal: the bar itself is
// bubbles/progress's, in plain characters, rendered with ViewAs; this type
// adds the label, the counts, the time and the redrawing, since the storm
// writes to stderr rather than running a Bubble Tea program. set may be
// called from any goroutine; start, then stop, from the owner's.
type progress struct {
	w     io.Writer
	label string
	total int
	begun time.Time
	bar   bubblesprogress.Model

	done     atomic.Int64
	quit     chan struct{}
	wg       sync.WaitGroup
	startOne sync.Once
	stopOne  sync.Once
}

// newProgress returns a progress bar for total units of work, drawn on w
// after label.
func newProgress(w io.Writer, label string, total int) *progress {
	bar := bubblesprogress.New(bubblesprogress.WithWidth(progressWidth), bubblesprogress.WithoutPercentage(),
		bubblesprogress.WithFillCharacters('#', '.'), bubblesprogress.WithColorProfile(termenv.Ascii))
	return &progress{w: w, label: label, total: total, begun: time.Now(), bar: bar, quit: make(chan struct{})}
}

// set records that done units of work are finished.
func (p *progress) set(done int) {
	p.done.Store(int64(done))
}

// start launches the goroutine that redraws the line every 200 ms.
func (p *progress) start() {
	p.startOne.Do(func() {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			tick := time.NewTicker(progressEvery)
			defer tick.Stop()
			for {
				select {
				case <-p.quit:
					return
				case <-tick.C:
					p.draw()
				}
			}
		}()
	})
}

// stop ends the redrawing goroutine, draws the final state and ends the
// line. Later calls do nothing.
func (p *progress) stop() {
	p.stopOne.Do(func() {
		close(p.quit)
		p.wg.Wait()
		p.draw()
		fmt.Fprintln(p.w)
	})
}

// draw redraws the line over itself.
func (p *progress) draw() {
	done := int(p.done.Load())
	frac := 1.0
	if p.total > 0 {
		frac = min(1, max(0, float64(done)/float64(p.total)))
	}
	fmt.Fprintf(p.w, "\r%s [%s] %3d%%  %s/%s  %.1fs", p.label, p.bar.ViewAs(frac),
		int(frac*100), groupThousands(int64(done)), groupThousands(int64(p.total)),
		time.Since(p.begun).Seconds())
}
