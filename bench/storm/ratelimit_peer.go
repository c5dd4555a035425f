package main

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// rlPeer is the peer in the ratelimit scenario: what a Go user writes by
// hand, a goroutine per session sending its prompts one after the other,
// each on the conversation so far, each retried with
// cenkalti/backoff/v5 (the same loop as the outage storm's peer: 429s
// retried, retry-after honoured through backoff.RetryAfter). It knows
// nothing of the limits: no pacing, no priority, no key switching.
type rlPeer struct {
	run    *rlRun
	wg     sync.WaitGroup
	mu     sync.Mutex
	timers []*time.Timer // the starts of a ramp
}

// runRLPeer runs the peer against a fresh fake server.
func runRLPeer(ctx context.Context, e *rlEnv) (System, error) {
	return runRateLimitContender(ctx, e, "peer",
		"one goroutine per session, prompts one after the other, cenkalti/backoff/v5 retry loop honouring retry-after; no pacing, no priority", false,
		func(run *rlRun) rlContender { return &rlPeer{run: run} })
}

// setup has nothing to prepare: a session is its goroutine.
func (p *rlPeer) setup(context.Context) error { return nil }

// launch starts each session's goroutine at its start.
func (p *rlPeer) launch(ctx context.Context) {
	sc := p.run.e.sc
	p.wg.Add(sc.Sessions)
	for i := range sc.Sessions {
		start := func() {
			defer p.wg.Done()
			p.session(ctx, i)
		}
		d := sc.startAt(i)
		if d <= 0 {
			go start()
			continue
		}
		p.mu.Lock()
		p.timers = append(p.timers, time.AfterFunc(d, start))
		p.mu.Unlock()
	}
}

// session sends session i's prompts one after the other, each with the
// conversation so far (the prompts and the answers before it).
func (p *rlPeer) session(ctx context.Context, i int) {
	sc, rec := p.run.e.sc, p.run.rec
	key := sc.keyOf(i)
	history := make([]*messages.Entry, 0, 2*sc.Prompts)
	for j := range sc.Prompts {
		history = append(history, &messages.Entry{Entry: &messages.Entry_User{User: &messages.UserMessage{Text: sc.promptText(i, j)}}})
		req := provider.Request{SessionID: strconv.Itoa(i), Model: rlModel, Credential: key, APIKey: key, Context: history}
		rec.begin(i, j)
		msg, err := p.prompt(ctx, req)
		if ctx.Err() != nil {
			return // stopped: the prompt never ended
		}
		rec.finish(i, j, err == nil, msg.GetUsage().GetInput(), msg.GetUsage().GetOutput())
		if err == nil {
			history = append(history, &messages.Entry{Entry: &messages.Entry_Assistant{Assistant: msg}})
		}
	}
}

// prompt sends req until it is answered, with backoff.Retry: each failure
// retried after the next backoff, or after its retry-after.
func (p *rlPeer) prompt(ctx context.Context, req provider.Request) (*messages.AssistantMessage, error) {
	s := p.run.e.settings
	op := func() (*messages.AssistantMessage, error) {
		msg := p.run.prov.Stream(ctx, req, func(provider.Delta) {})
		switch msg.GetStopReason() {
		case messages.StopReason_STOP_REASON_ERROR:
			if sec, ok := retryAfterSeconds(msg); ok {
				return nil, backoff.RetryAfter(sec)
			}
			return nil, errors.New(msg.GetErrorMessage())
		case messages.StopReason_STOP_REASON_ABORTED:
			return nil, backoff.Permanent(errAborted)
		}
		return msg, nil
	}
	return backoff.Retry(ctx, op,
		backoff.WithBackOff(peerBackOff(s.BaseDelay)),
		backoff.WithMaxTries(uint(s.MaxRetries+1)),
		backoff.WithMaxElapsedTime(0))
}

// counts has nothing of the peer's own.
func (p *rlPeer) counts() map[string]float64 { return nil }

// close stops the starts to come and waits for every session goroutine
// (the run's context has ended).
func (p *rlPeer) close() error {
	p.mu.Lock()
	for _, t := range p.timers {
		if t.Stop() {
			p.wg.Done()
		}
	}
	p.timers = nil
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}
