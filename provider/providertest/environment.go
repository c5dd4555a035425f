package providertest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// FromEnv is what every value of NoEnvironment's env holds, so that a
// request carrying any of them is found.
const FromEnv = "from-env"

// NoEnvironment checks that an adapter sends the key of the request and
// nothing its SDK would read from the environment. With every variable of
// env set (the SDK's keys, base URL, organization, custom headers; each
// value holding FromEnv), it runs one call for each case: a request
// without a key sends no credential header at all, one with a key sends
// that key alone, and a provider without a base URL calls defaultHost.
// newProvider builds the adapter once env is set, for a base URL ("" for
// the adapter's default) and an HTTP client; the env keeps its values
// until t ends.
func NoEnvironment(t *testing.T, env map[string]string, defaultHost string, newProvider func(baseURL string, client *http.Client) provider.Provider) {
	for k, v := range env {
		if !strings.Contains(v, FromEnv) {
			t.Fatalf("env %s=%q does not hold %q", k, v, FromEnv)
		}
		t.Setenv(k, v)
	}
	for _, tc := range []struct {
		name, baseURL, key, wantHost string
	}{
		{"no key, default base URL", "", "", defaultHost},
		{"no key, base URL", "http://127.0.0.1:9/v1", "", "127.0.0.1:9"},
		{"key, default base URL", "", "sk-request", defaultHost},
		{"key, base URL", "http://127.0.0.1:9/v1", "sk-request", "127.0.0.1:9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &CannedTransport{Status: http.StatusUnauthorized, ContentType: "application/json",
				Body: `{"type":"error","error":{"type":"authentication_error","message":"no key"}}`}
			p := newProvider(tc.baseURL, &http.Client{Transport: tr})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			p.Stream(ctx, provider.Request{SessionID: "s1", Model: "m", Credential: "c", APIKey: tc.key,
				Context: []*messages.Entry{{Seq: 1, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: "hi"}}}}}, nil)
			reqs := tr.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			checkSent(t, reqs[0], tc.key, tc.wantHost)
		})
	}
}

// checkSent checks that r went to wantHost with key alone as its
// credential (none when key is ""), and holds nothing from the
// environment.
func checkSent(t *testing.T, r *http.Request, key, wantHost string) {
	t.Helper()
	if r.URL.Host != wantHost {
		t.Errorf("request to %s, want %s", r.URL, wantHost)
	}
	auth, apiKey := r.Header.Get("Authorization"), r.Header.Get("X-Api-Key")
	switch {
	case key == "" && (auth != "" || apiKey != ""):
		t.Errorf("a request without a key sent Authorization %q, X-Api-Key %q", auth, apiKey)
	case key != "" && auth != "Bearer "+key && apiKey != key:
		t.Errorf("key %q sent as Authorization %q, X-Api-Key %q", key, auth, apiKey)
	}
	if strings.Contains(r.URL.String(), FromEnv) {
		t.Errorf("request URL %s comes from the environment", r.URL)
	}
	for name, values := range r.Header {
		for _, v := range values {
			if strings.Contains(v, FromEnv) {
				t.Errorf("header %s: %q comes from the environment", name, v)
			}
		}
	}
}
