package history_test

import (
	"testing"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
)

// BenchmarkAppendSync is a turn as a session writes it (the user's entry,
// the assistant's entry, then the Sync that ends the turn), per policy:
// what a turn costs the file store.
func BenchmarkAppendSync(b *testing.B) {
	for _, policy := range []history.Sync{history.SyncTurn, history.SyncEntry, history.SyncNone} {
		b.Run(policy.String(), func(b *testing.B) {
			s, err := history.OpenFileStore(b.TempDir(), history.WithSync(policy))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			l, _, err := s.Open("s")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			prompt, answer := sample()[0].GetUser(), sample()[1].GetAssistant()
			b.ReportAllocs()
			for i := range b.N {
				seq := uint64(2 * i)
				if err := l.Append(&messages.Entry{Seq: seq + 1, Entry: &messages.Entry_User{User: prompt}}); err != nil {
					b.Fatal(err)
				}
				if err := l.Append(&messages.Entry{Seq: seq + 2, Entry: &messages.Entry_Assistant{Assistant: answer}}); err != nil {
					b.Fatal(err)
				}
				if err := l.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
