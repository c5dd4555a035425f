package plaintext

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" when valid, else a part of the error
	}{
		{"gpt-4o", ""},
		{"meta/llama-3 70b", ""},
		{"modèle-été", ""},
		{"", ""},
		{"a\x00b", `model name "a\x00b": control character U+0000 at byte 1`},
		{"gpt\n4", "control character U+000A at byte 3"},
		{"tab\there", "U+0009"},
		{"del\x7f", "U+007F"},
		{"c1\u0085", "U+0085"},
		{"bad\xffutf8", "invalid UTF-8 at byte 3"},
		{"\uFFFD is a real character", ""},
	}
	for _, tt := range tests {
		err := Check("model name", tt.in)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Check(%q) = %v, want nil", tt.in, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("Check(%q) = %v, want an error with %q", tt.in, err, tt.want)
		}
	}
}
