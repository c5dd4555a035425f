package provider

import "testing"

// A refusal's error message is the provider's error text verbatim, else
// the explanation of its stop details, else the adapter's default.
func TestRefusalMessage(t *testing.T) {
	const (
		text        = "Refusal (cyber): Classifier declined this turn."
		explanation = "Classifier declined this turn."
		fallback    = "The response was stopped by the provider's content filter"
	)
	for _, tc := range []struct {
		name, errorText, explanation, want string
	}{
		{"the error text wins over the explanation", text, explanation, text},
		{"the error text is kept verbatim", " " + text + "\n", explanation, " " + text + "\n"},
		{"no error text: the explanation", "", explanation, explanation},
		{"white space is no error text", " \n", explanation, explanation},
		{"the error text alone", text, "", text},
		{"neither: the default", "", "", fallback},
		{"white space is no explanation", "", "\t", fallback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RefusalMessage(tc.errorText, tc.explanation, fallback); got != tc.want {
				t.Errorf("RefusalMessage(%q, %q, fallback) = %q, want %q", tc.errorText, tc.explanation, got, tc.want)
			}
		})
	}
}
