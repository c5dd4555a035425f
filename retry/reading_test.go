package retry

import (
	"strings"
	"testing"
)

// lowered is the text the classifier's substrings are matched against: s
// with its ASCII letters, and only those, lowered.
func lowered(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func TestContainsLowered(t *testing.T) {
	for _, tc := range []struct {
		s, sub string
		want   bool
	}{
		{"Rate Limit reached", "rate limit", true},
		{"RATE LIMIT", "rate limit", true},
		{"rate limi", "rate limit", false},
		{"xrate limit", "rate limit", true},
		{"ratE_limit", "rate limit", false},
		{"I/O Timeout", "i/o timeout", true},
		{"Request Too Large (TPM)", "(tpm)", true},
		{"EPIPE", "epipe", true},
		{"epip", "epipe", false},
		{"EPIPE", "EPIPE", false}, // substrings are lower case: upper case never matches
		{"C0", "C0", false},
		{"\u212a\u017f", "ks", false}, // no Unicode folding: Kelvin sign, long s
		{"\xc3\x84rger", "\xc3\xa4rger", false},
		{"", "ab", false},
		{"ab", "", true},
		{"aab", "ab", true},
		{"zzz Overloaded", "overloaded", true},
	} {
		if got := containsLowered(tc.s, tc.sub); got != tc.want {
			t.Errorf("containsLowered(%q, %q) = %t, want %t", tc.s, tc.sub, got, tc.want)
		}
		if want := strings.Contains(lowered(tc.s), tc.sub); want != tc.want {
			t.Errorf("case %q, %q: lowered text contains = %t, the table says %t", tc.s, tc.sub, want, tc.want)
		}
	}
}

func FuzzContainsLowered(f *testing.F) {
	f.Add("Rate LIMIT reached", "rate limit")
	f.Add("Connection Reset by peer", "connection reset by peer")
	f.Add("\u212aelvin", "kelvin")
	f.Fuzz(func(t *testing.T, s, sub string) {
		if got, want := containsLowered(s, sub), strings.Contains(lowered(s), sub); got != want {
			t.Fatalf("containsLowered(%q, %q) = %t, want %t", s, sub, got, want)
		}
	})
}

// Every substring of the tables is found, whatever the case of the text,
// by the bigram filter and the scan: the filter never rules a match out.
func TestNeedlesFoundInLoweredBigrams(t *testing.T) {
	var all []needle
	for _, rows := range familyRows {
		for _, r := range rows {
			all = append(all, r.all...)
			all = append(all, r.any...)
			all = append(all, r.none...)
		}
	}
	for _, row := range limitReasons {
		all = append(all, row.words...)
	}
	all = append(all, textHintWords...)
	for _, n := range all {
		if n.s != lowered(n.s) {
			t.Errorf("substring %q is not lower case: it can never match", n.s)
		}
		for _, text := range []string{n.s, strings.ToUpper(n.s), "Error: " + strings.ToUpper(n.s[:1]) + n.s[1:] + "."} {
			var r reading
			r.of(text)
			if !n.mayBeIn(&r.set, text) || !n.isIn(&r.set, text) {
				t.Errorf("%q not found in %q", n.s, text)
			}
		}
	}
}

// A reading read again for another text holds that text's bigrams only.
func TestReadingRereads(t *testing.T) {
	var r reading
	over := needles("overloaded")[0]
	if r.of("Server OVERLOADED"); !over.mayBeIn(&r.set, r.text) || !over.isIn(&r.set, r.text) {
		t.Fatal("overloaded not found in the first reading")
	}
	if same := r.of("Server OVERLOADED"); same != &r {
		t.Fatal("of did not return its reading")
	}
	r.of("a different error text, much longer than the first one")
	if r.set.has(gramHash('o', 'v')) {
		t.Fatal("the second reading holds a bigram of the first text only")
	}
	if r.text != "a different error text, much longer than the first one" {
		t.Fatalf("reading of %q", r.text)
	}
}
