package provider

import "testing"

// named is a provider that says the family it is given.
type named struct {
	*Scripted
	family string
}

func (n named) GenAIProviderName() string { return n.family }

var _ GenAINamer = named{}

// A provider's gen_ai.provider.name is what it says; one that says
// nothing, or has no say, is _OTHER.
func TestGenAIProviderName(t *testing.T) {
	for _, tc := range []struct {
		p    Provider
		want string
	}{
		{named{NewScripted(), "aws.bedrock"}, "aws.bedrock"},
		{named{NewScripted(), ""}, GenAIOther},
		{NewScripted(), GenAIOther},
	} {
		if got := GenAIProviderName(tc.p); got != tc.want {
			t.Errorf("GenAIProviderName(%T) = %q, want %q", tc.p, got, tc.want)
		}
	}
}
