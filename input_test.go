package musepi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/musepi/musepi"
)

// Model names and session ids with NUL or other control characters are
// rejected with an error that shows them escaped.
func TestControlCharactersRejected(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for _, model := range []string{"p/m\x00", "p/m\nx", "p/\x1b[31mred"} {
		if _, err := h.rt.NewSession(ctx, musepi.WithModel(model)); err == nil || !strings.Contains(err.Error(), "control character") {
			t.Errorf("NewSession(WithModel(%q)) = %v, want a control character error", model, err)
		}
	}
	for _, id := range []string{"a\x00b", "line\nbreak", "tab\t"} {
		if _, err := h.rt.NewSession(ctx, musepi.WithModel("p/m"), musepi.WithSessionID(id)); err == nil {
			t.Errorf("NewSession(WithSessionID(%q)) succeeded", id)
		}
	}
	s, _ := h.session()
	if err := s.SetModel(ctx, "p/m\x00"); err == nil || !strings.Contains(err.Error(), `"p/m\x00": control character U+0000`) {
		t.Errorf("SetModel with NUL = %v, want a control character error", err)
	}
	if s.Model() != "p/m" {
		t.Errorf("model %q after a rejected SetModel", s.Model())
	}
}
