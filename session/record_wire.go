package session

import (
	"fmt"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// Wire is the record in its protobuf form, for a store or another node.
func (r Record) Wire() *messages.SessionRecord {
	c := r.Chain
	w := &messages.SessionRecord{
		State: r.State.String(), Generation: r.Generation, Turn: r.Turn, AutoRetry: r.AutoRetry,
		Primary: r.Primary, Model: r.Model, Pinned: r.Pinned, PrimaryUntilUnixNano: unixNano(r.PrimaryUntil),
		Credential: r.Credential, Reservation: r.Reservation,
		Before: &messages.RecordModelState{Model: r.Before.Model, Primary: r.Before.Primary, Pinned: r.Before.Pinned,
			PrimaryUntilUnixNano: unixNano(r.Before.PrimaryUntil)},
		Attempt: int32(r.Attempt), SleepUntilUnixNano: unixNano(r.SleepUntil), SleepToken: r.SleepToken,
		AbortUser: r.Aborts.User, AbortDispose: r.Aborts.Dispose, AbortEditGuard: r.Aborts.EditGuard,
		Chain: &messages.RecordChain{
			Phase: c.Phase.String(), Attempt: int32(c.Attempt), Started: c.Started, Token: c.Token, Generation: c.Generation,
			HeldToken: c.HeldToken, AskedAtUnixNano: unixNano(c.AskedAt),
			Class: c.Class.String(), ErrText: c.ErrText, DelayNs: int64(c.Delay), WaitNs: int64(c.Wait), CooldownNs: int64(c.Cooldown),
			Switched: c.Switched, FallbackApplied: c.FallbackApplied, FallbackModel: c.FallbackModel, FallbackRole: c.FallbackRole,
		},
		Last: r.Last, Failure: r.Failure, FailureKind: string(r.FailureKind),
		Role: r.Role, HistorySeq: r.HistorySeq,
	}
	if e := r.RetryEnd; e != nil {
		w.RetryEnd = &messages.RecordRetryEnd{Success: e.Success, Attempt: int32(e.Attempt), FinalError: e.FinalError, Class: e.Class.String()}
	}
	return w
}

// RecordFromWire reads a record's protobuf form; a state, phase or class
// it does not know fails (a record written by a newer program).
func RecordFromWire(w *messages.SessionRecord) (Record, error) {
	state, ok := parseState(w.GetState())
	if !ok {
		return Record{}, fmt.Errorf("session record: unknown state %q", w.GetState())
	}
	wc := w.GetChain()
	phase, ok := ParseChainPhase(wc.GetPhase())
	if !ok {
		return Record{}, fmt.Errorf("session record: unknown chain phase %q", wc.GetPhase())
	}
	class, ok := retry.ParseClass(wc.GetClass())
	if !ok {
		return Record{}, fmt.Errorf("session record: unknown error class %q", wc.GetClass())
	}
	wb := w.GetBefore()
	r := Record{
		State: state, Generation: w.GetGeneration(), Turn: w.GetTurn(), AutoRetry: w.GetAutoRetry(),
		Primary: w.GetPrimary(), Model: w.GetModel(), Pinned: w.GetPinned(), PrimaryUntil: fromUnixNano(w.GetPrimaryUntilUnixNano()),
		Credential: w.GetCredential(), Reservation: w.GetReservation(),
		Before: ModelState{Model: wb.GetModel(), Primary: wb.GetPrimary(), Pinned: wb.GetPinned(),
			PrimaryUntil: fromUnixNano(wb.GetPrimaryUntilUnixNano())},
		Attempt: int(w.GetAttempt()), SleepUntil: fromUnixNano(w.GetSleepUntilUnixNano()), SleepToken: w.GetSleepToken(),
		Aborts: retry.AbortState{User: w.GetAbortUser(), Dispose: w.GetAbortDispose(), EditGuard: w.GetAbortEditGuard()},
		Chain: ChainRecord{
			Phase: phase, Attempt: int(wc.GetAttempt()), Started: wc.GetStarted(), Token: wc.GetToken(), Generation: wc.GetGeneration(),
			HeldToken: wc.GetHeldToken(), AskedAt: fromUnixNano(wc.GetAskedAtUnixNano()),
			Class: class, ErrText: wc.GetErrText(), Delay: time.Duration(wc.GetDelayNs()), Wait: time.Duration(wc.GetWaitNs()),
			Cooldown: time.Duration(wc.GetCooldownNs()), Switched: wc.GetSwitched(),
			FallbackApplied: wc.GetFallbackApplied(), FallbackModel: wc.GetFallbackModel(), FallbackRole: wc.GetFallbackRole(),
		},
		Last: w.GetLast(), Failure: w.GetFailure(), FailureKind: ErrorKind(w.GetFailureKind()),
		Role: w.GetRole(), HistorySeq: w.GetHistorySeq(),
	}
	if e := w.GetRetryEnd(); e != nil {
		c, ok := retry.ParseClass(e.GetClass())
		if !ok {
			return Record{}, fmt.Errorf("session record: unknown error class %q", e.GetClass())
		}
		r.RetryEnd = &retry.EndEvent{Success: e.GetSuccess(), Attempt: int(e.GetAttempt()), FinalError: e.GetFinalError(), Class: c}
	}
	return r, nil
}

// parseState is the State named name (State.String).
func parseState(name string) (State, bool) {
	for s, n := range stateNames {
		if n == name {
			return State(s), true
		}
	}
	return 0, false
}

// unixNano is t in Unix nanoseconds, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromUnixNano is unixNano's inverse.
func fromUnixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
