package provider

import "strings"

// RefusalMessage is the error message of a turn the provider refused (a
// classifier refusal, with stop details of type refusal or sensitive). It
// keeps the provider's words: errorText, the error text the provider sent
// with the refusal, verbatim; else explanation, the one of the refusal's
// structured stop details; else fallback, the adapter's own wording. A text
// of only white space counts as none.
func RefusalMessage(errorText, explanation, fallback string) string {
	for _, s := range [...]string{errorText, explanation} {
		if strings.TrimSpace(s) != "" {
			return s
		}
	}
	return fallback
}
