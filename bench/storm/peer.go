package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// The peer is what a Go user would write by hand: one goroutine per
// session, each running a retry loop with cenkalti/backoff/v5 tuned to
// MusePi's numbers. It retries every failure, honours retry-after as
// backoff.RetryAfter, and has no credential switching or model fallback.

// peerBackOff is MusePi's local backoff as a backoff.ExponentialBackOff.
// MusePi waits min(base·2^(n-1), 8 s) × U[0.75, 1.0] before retry n;
// ExponentialBackOff waits interval × U[1-f, 1+f], so an interval of 0.875
// times MusePi's nominal delay with f = 1/7 gives the same range, the
// interval doubling up to 0.875 × 8 s.
func peerBackOff(base time.Duration) *backoff.ExponentialBackOff {
	const scale = 0.875
	return &backoff.ExponentialBackOff{
		InitialInterval:     time.Duration(scale * float64(min(base, retry.MaxBackoff))),
		RandomizationFactor: 1.0 / 7,
		Multiplier:          2,
		MaxInterval:         time.Duration(scale * float64(retry.MaxBackoff)),
	}
}

// retryAfterSeconds reads a retry-after header in whole seconds, as a user
// of backoff.RetryAfter(seconds int) would.
func retryAfterSeconds(msg *messages.AssistantMessage) (int, bool) {
	v, ok := msg.GetHeaders()["retry-after"]
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// lockstepMinPerBucket is the mean number of retries per 10 ms bucket of
// its jitter window a wave needs to count in waves.index (when some wave
// has that many): thinner waves measure sampling noise, not lockstep.
const lockstepMinPerBucket = 50

// waves collects when retry requests were sent, by retry number: wave n
// holds every session's n-th retry (n from 1), as a time from the start of
// the run. Any contender can feed it; it measures how much the sessions'
// retries bunch up. The zero value is ready to use; it is safe for
// concurrent use.
type waves struct {
	mu sync.Mutex
	at map[int][]time.Duration
}

// add records that a session sent its n-th retry at at.
func (w *waves) add(n int, at time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.at == nil {
		w.at = map[int][]time.Duration{}
	}
	w.at[n] = append(w.at[n], at)
}

// index is the lockstep index of the run: for each wave n, lockstepIndex
// over a window of a quarter of retry n's nominal backoff
// (retry.NominalBackoff(n, base), the width of its jitter), and the
// largest of those over the waves dense enough to measure
// (lockstepMinPerBucket), or over all waves if none is. It is 0 when no
// retry was recorded.
func (w *waves) index(base time.Duration) float64 {
	worst, _ := w.indexes(base)
	return worst
}

// indexes is index, with the index of every wave measured, by wave.
func (w *waves) indexes(base time.Duration) (worst float64, byWave map[int]float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	byWave = map[int]float64{}
	dense := func(n int, ts []time.Duration) bool {
		buckets := max(1, float64(retry.NominalBackoff(n, base)/4)/float64(10*time.Millisecond))
		return float64(len(ts))/buckets >= lockstepMinPerBucket
	}
	anyDense := false
	for n, ts := range w.at {
		anyDense = anyDense || dense(n, ts)
	}
	for n, ts := range w.at {
		if anyDense && !dense(n, ts) {
			continue
		}
		byWave[n] = lockstepIndex(ts, retry.NominalBackoff(n, base)/4)
		worst = max(worst, byWave[n])
	}
	return worst, byWave
}

// peerRun is one run of the peer.
type peerRun struct {
	e     *env
	clk   clock.Clock
	prov  provider.Provider
	rec   *recorder
	start time.Time
	waves waves

	cancel  context.CancelFunc // ends the sessions' context (close)
	wg      sync.WaitGroup     // session goroutines, and starts to come
	starter starter

	requests  atomic.Int64
	completed atomic.Int64
	failed    atomic.Int64
}

// finished is the number of sessions that completed or gave up.
func (r *peerRun) finished() int { return int(r.completed.Load() + r.failed.Load()) }

// request is session i's prompt.
func (r *peerRun) request(i int) provider.Request {
	key := limitedKey
	if i%2 == 1 {
		key = freeKey
	}
	return provider.Request{
		SessionID:  fmt.Sprint(i),
		Model:      model(r.e.scenario.kindOf(i)),
		Credential: key,
		APIKey:     key,
		Context: []*messages.Entry{{Entry: &messages.Entry_User{User: &messages.UserMessage{
			Text: "Hello from session " + strconv.Itoa(i)}}}},
	}
}

// hinted reports whether session i's failures carry retry hints; their
// retries follow the hints, not the backoff, so waves leave them out.
func (r *peerRun) hinted(i int) bool { return len(r.e.scenario.kindOf(i).headers) > 0 }

func (r *peerRun) stream(ctx context.Context, req provider.Request) *messages.AssistantMessage {
	r.requests.Add(1)
	return r.prov.Stream(ctx, req, func(provider.Delta) {})
}

// sessionVirtual is one session on the virtual clock: backoff.Retry's loop
// written out, since Retry's timer cannot be replaced. It holds one unit of
// the clock's work (Begun by the caller) except while it waits for its
// timer, whose callback Begins again before waking it.
func (r *peerRun) sessionVirtual(ctx context.Context, vc *clock.Virtual, i int) {
	req, hinted := r.request(i), r.hinted(i)
	b := peerBackOff(r.e.settings.BaseDelay)
	b.Reset()
	wake := make(chan struct{}, 1)
	for try := 1; ; try++ {
		if try > 1 && !hinted {
			r.waves.add(try-1, vc.Now().Sub(r.start))
		}
		msg := r.stream(ctx, req)
		switch {
		case msg.GetStopReason() == messages.StopReason_STOP_REASON_ABORTED:
			vc.End() // cancelled: neither completed nor failed
			return
		case msg.GetStopReason() != messages.StopReason_STOP_REASON_ERROR:
			r.completed.Add(1)
			r.rec.completion(vc.Now())
			vc.End()
			return
		case try > r.e.settings.MaxRetries:
			r.failed.Add(1)
			vc.End()
			return
		}
		next := b.NextBackOff()
		if s, ok := retryAfterSeconds(msg); ok { // as backoff.Retry does
			next = time.Duration(s) * time.Second
			b.Reset()
		}
		t := vc.AfterFunc(next, func() {
			vc.Begin()
			wake <- struct{}{}
		})
		vc.End()
		select {
		case <-wake:
		case <-ctx.Done():
			if !t.Stop() { // fired: take over its Begin
				<-wake
				vc.End()
			}
			return
		}
	}
}

// errAborted ends a real-mode session whose stream was cancelled.
var errAborted = errors.New("stream aborted")

// sessionReal is one session on the wall clock, with backoff.Retry. It
// records each wake-up's lateness: the time from when the backoff should
// have ended (Notify's now + delay) to the next attempt.
func (r *peerRun) sessionReal(ctx context.Context, i int) {
	req, hinted := r.request(i), r.hinted(i)
	var (
		due   time.Time
		tries int
	)
	op := func() (struct{}, error) {
		tries++
		if tries > 1 {
			now := time.Now()
			r.rec.lateness(now.Sub(due), tries == 2)
			if !hinted {
				r.waves.add(tries-1, now.Sub(r.start))
			}
		}
		msg := r.stream(ctx, req)
		switch msg.GetStopReason() {
		case messages.StopReason_STOP_REASON_ERROR:
			if s, ok := retryAfterSeconds(msg); ok {
				return struct{}{}, backoff.RetryAfter(s)
			}
			return struct{}{}, errors.New(msg.GetErrorMessage())
		case messages.StopReason_STOP_REASON_ABORTED:
			return struct{}{}, backoff.Permanent(errAborted)
		}
		return struct{}{}, nil
	}
	_, err := backoff.Retry(ctx, op,
		backoff.WithBackOff(peerBackOff(r.e.settings.BaseDelay)),
		backoff.WithMaxTries(uint(r.e.settings.MaxRetries+1)),
		backoff.WithMaxElapsedTime(0), // MusePi has no overall deadline
		backoff.WithNotify(func(_ error, d time.Duration) { due = time.Now().Add(d) }),
	)
	switch {
	case err == nil:
		r.completed.Add(1)
		r.rec.completion(r.clk.Now())
	case errors.Is(err, errAborted) || ctx.Err() != nil:
		// cancelled: neither completed nor failed
	default:
		r.failed.Add(1)
	}
}

// runPeer runs the peer: e.sessions goroutines, each sending one prompt
// and retrying it by hand, driven and measured by drive.
func runPeer(ctx context.Context, e *env) (System, error) {
	clk, prov, rec, cleanup, err := e.newRun()
	if err != nil {
		return System{}, err
	}
	r := &peerRun{e: e, clk: clk, prov: prov, rec: rec, start: clk.Now()}
	restart := func(now time.Time) error {
		r.start = now
		return restartScenario(prov, rec, now)
	}
	return drive(ctx, e, "peer", "one goroutine per session, cenkalti/backoff/v5 retry loop",
		measured{clk: clk, rec: rec, waves: &r.waves, cleanup: cleanup, restart: restart}, r)
}

// setup has nothing to prepare: a session is its goroutine.
func (r *peerRun) setup(context.Context) error { return nil }

// launch starts one goroutine per session: on a virtual clock the
// hand-written loop, on the wall clock backoff.Retry.
func (r *peerRun) launch(ctx context.Context) error {
	ctx, r.cancel = context.WithCancel(ctx)
	vc, virtual := r.clk.(*clock.Virtual)
	r.wg.Add(r.e.sessions)
	r.starter.launch(r.clk, r.e.scenario, r.e.sessions, func(i int) {
		if virtual {
			vc.Begin() // the session's first attempt
			go func() {
				defer r.wg.Done()
				r.sessionVirtual(ctx, vc, i)
			}()
			return
		}
		go func() {
			defer r.wg.Done()
			r.sessionReal(ctx, i)
		}()
	})
	return nil
}

// counts are the prompts and requests of the run.
func (r *peerRun) counts() runCounts {
	return runCounts{completed: int(r.completed.Load()), failed: int(r.failed.Load()), requests: int(r.requests.Load())}
}

// close cancels the sessions still running (none, unless the run failed)
// and waits for every session goroutine to return.
func (r *peerRun) close() error {
	if r.cancel != nil {
		r.cancel()
	}
	for range r.starter.cancel() {
		r.wg.Done() // a session that never started
	}
	r.wg.Wait()
	return nil
}
