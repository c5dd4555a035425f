package protoname

import "testing"

func TestNames(t *testing.T) {
	for _, tc := range []struct{ goName, proto string }{
		{"PrimaryUntil", "primary_until"}, {"HistorySeq", "history_seq"}, {"Error", "error"}, {"WillRetry", "will_retry"},
	} {
		if got := Snake(tc.goName); got != tc.proto {
			t.Errorf("Snake(%q) = %q, want %q", tc.goName, got, tc.proto)
		}
		if got := Camel(tc.proto); got != tc.goName {
			t.Errorf("Camel(%q) = %q, want %q", tc.proto, got, tc.goName)
		}
	}
}
