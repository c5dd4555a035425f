package anthropic

import (
	"net/http"
	"testing"

	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/providertest"
)

// The provider reads no environment: a request without a key sends none
// (not ANTHROPIC_API_KEY's, nor ANTHROPIC_AUTH_TOKEN's, nor a profile's),
// and ANTHROPIC_BASE_URL and ANTHROPIC_CUSTOM_HEADERS are not used.
func TestNoEnvironment(t *testing.T) {
	env := map[string]string{
		"ANTHROPIC_API_KEY":        "sk-from-env",
		"ANTHROPIC_AUTH_TOKEN":     "token-from-env",
		"ANTHROPIC_PROFILE":        "profile-from-env",
		"ANTHROPIC_BASE_URL":       "http://from-env.invalid",
		"ANTHROPIC_CUSTOM_HEADERS": "X-Custom: from-env",
	}
	providertest.NoEnvironment(t, env, "api.anthropic.com", func(base string, client *http.Client) provider.Provider {
		return New(Config{BaseURL: base, HTTPClient: client})
	})
}
