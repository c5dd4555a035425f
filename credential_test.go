package musepi_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider"
)

// NewRuntime refuses a credential without a key, naming the provider and
// the credential, through both ways of registering a provider: an empty
// key is never passed on to an adapter (whose SDK might fill it in from
// OPENAI_API_KEY, so that two credentials would be one key).
func TestNewRuntimeRefusesEmptyKeys(t *testing.T) {
	t.Setenv("MUSEPI_TEST_EMPTY_KEY", "")
	t.Setenv("MUSEPI_TEST_BLANK_KEY", " \t")
	os.Unsetenv("MUSEPI_TEST_UNSET_KEY")
	main := musepi.Credential{Name: "main", APIKey: "sk-main"}
	tests := []struct {
		name   string
		backup musepi.Credential
		want   string
	}{
		{"no key", musepi.Credential{Name: "backup"},
			`credential "backup": empty API key (set APIKey, or APIKeyEnv`},
		{"blank key", musepi.Credential{Name: "backup", APIKey: "  "},
			`credential "backup": empty API key`},
		{"variable not set", musepi.Credential{Name: "backup", APIKeyEnv: "MUSEPI_TEST_UNSET_KEY"},
			`credential "backup": APIKeyEnv: environment variable MUSEPI_TEST_UNSET_KEY is not set`},
		{"variable empty", musepi.Credential{Name: "backup", APIKeyEnv: "MUSEPI_TEST_EMPTY_KEY"},
			`credential "backup": APIKeyEnv: environment variable MUSEPI_TEST_EMPTY_KEY is empty`},
		{"variable blank", musepi.Credential{Name: "backup", APIKeyEnv: "MUSEPI_TEST_BLANK_KEY"},
			`credential "backup": APIKeyEnv: environment variable MUSEPI_TEST_BLANK_KEY is empty`},
		{"key and variable", musepi.Credential{Name: "backup", APIKey: "sk-b", APIKeyEnv: "MUSEPI_TEST_BLANK_KEY"},
			`credential "backup": both APIKey and APIKeyEnv are set`},
	}
	register := map[string]func(creds ...musepi.Credential) musepi.Option{
		"WithProvider": func(creds ...musepi.Credential) musepi.Option {
			return musepi.WithProvider("openai", provider.NewScripted(), creds...)
		},
		"WithCustomProvider": func(creds ...musepi.Credential) musepi.Option {
			return musepi.WithCustomProvider("openai", nopProvider{}, creds...)
		},
	}
	for how, with := range register {
		for _, tt := range tests {
			t.Run(how+"/"+tt.name, func(t *testing.T) {
				rt, err := musepi.NewRuntime(with(main, tt.backup))
				if err == nil {
					_ = rt.Shutdown(context.Background())
					t.Fatal("NewRuntime accepted the credential")
				}
				if want := `musepi: WithProvider("openai"): ` + tt.want; !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want it to say %q", err, want)
				}
			})
		}
	}
}

// APIKeyEnv reads the key from the environment when the runtime starts
// (spaces trimmed): the provider gets that key with each call.
func TestCredentialKeyFromEnvironment(t *testing.T) {
	t.Setenv("MUSEPI_TEST_KEY_FROM_ENV", " sk-from-env\n")
	llm := provider.NewScripted(provider.Outcome{Message: provider.Text("hi")})
	rt, err := musepi.NewRuntime(musepi.WithProvider("p", llm, musepi.Credential{Name: "env", APIKeyEnv: "MUSEPI_TEST_KEY_FROM_ENV"}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Shutdown(context.Background()) }()
	t.Setenv("MUSEPI_TEST_KEY_FROM_ENV", "sk-changed-later") // read once, at NewRuntime
	s, err := rt.NewSession(context.Background(), musepi.WithModel("p/m"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prompt(context.Background(), "hello"); err != nil {
		t.Fatal(err)
	}
	calls := llm.Calls()
	if len(calls) != 1 || calls[0].Credential != "env" || calls[0].APIKey != "sk-from-env" {
		t.Fatalf("calls %+v, want one with credential env and key sk-from-env", calls)
	}
}

// nopProvider is a custom provider that is never called.
type nopProvider struct{}

func (nopProvider) Stream(context.Context, musepi.ProviderRequest, func(musepi.Delta)) *musepi.AssistantMessage {
	return nil
}

func (nopProvider) ResetSession(string) {}
