package ratelimit

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/messages"
)

func TestProtoRoundTrip(t *testing.T) {
	if m := (Snapshot{}).Proto(); m != nil {
		t.Errorf("empty snapshot: %v, want nil", m)
	}
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			s := Parse(tc.headers, now)
			m := s.Proto()
			if (m == nil) != (s.Len() == 0) {
				t.Fatalf("proto %v for %d kinds", m, s.Len())
			}
			// Through the wire and back: the same limits, resets to the
			// millisecond above.
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var back messages.RateLimits
			if err := proto.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			want := map[Kind]Limit{}
			for k, l := range tc.want {
				l.Reset = ceilMs(l.Reset)
				want[k] = l
			}
			wantSnapshot(t, "FromProto", FromProto(&back), want)
		})
	}
}

func ceilMs(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(time.Millisecond - 1).Truncate(time.Millisecond)
}

func TestProtoFields(t *testing.T) {
	var s Snapshot
	s.Set(Requests, lim(60, 0, now.Add(1500*time.Microsecond)))
	s.Set(OutputTokens, Limit{Remaining: 7, HasRemaining: true})
	limit, zero, seven := int64(60), int64(0), int64(7)
	want := &messages.RateLimits{
		Requests:     &messages.RateLimit{Limit: &limit, Remaining: &zero, ResetUnixMs: now.UnixMilli() + 2},
		OutputTokens: &messages.RateLimit{Remaining: &seven},
	}
	if got := s.Proto(); !proto.Equal(got, want) {
		t.Errorf("proto\n got %v\nwant %v", got, want)
	}
}

func TestFromProtoDistrusts(t *testing.T) {
	neg, zero, five := int64(-1), int64(0), int64(5)
	s := FromProto(&messages.RateLimits{
		Requests:     &messages.RateLimit{Limit: &neg, Remaining: &neg, ResetUnixMs: now.UnixMilli()},
		Tokens:       &messages.RateLimit{Limit: &zero, Remaining: &five, ResetUnixMs: -5},
		InputTokens:  &messages.RateLimit{ResetUnixMs: now.UnixMilli()},
		OutputTokens: nil,
	})
	wantSnapshot(t, "FromProto", s, map[Kind]Limit{Tokens: {Remaining: 5, HasRemaining: true}})
	if FromProto(nil).Len() != 0 {
		t.Error("nil message holds limits")
	}
}
