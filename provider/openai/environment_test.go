package openai

import (
	"net/http"
	"testing"

	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/providertest"
)

// Neither API reads the environment: a request without a key sends none
// (the SDK's client would send OPENAI_API_KEY's), and the base URL, the
// organization, the project and the custom headers the SDK reads are not
// used either.
func TestNoEnvironment(t *testing.T) {
	env := map[string]string{
		"OPENAI_API_KEY":        "sk-from-env",
		"OPENAI_ADMIN_KEY":      "sk-admin-from-env",
		"OPENAI_BASE_URL":       "http://from-env.invalid/v1",
		"OPENAI_ORG_ID":         "org-from-env",
		"OPENAI_PROJECT_ID":     "proj-from-env",
		"OPENAI_CUSTOM_HEADERS": "X-Custom: from-env",
	}
	for _, api := range []string{APIChat, APIResponses} {
		t.Run(api, func(t *testing.T) {
			providertest.NoEnvironment(t, env, "api.openai.com", func(base string, client *http.Client) provider.Provider {
				return New(Config{BaseURL: base, API: api, HTTPClient: client})
			})
		})
	}
}
