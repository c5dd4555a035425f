package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi"
)

func TestParseFlagsRateLimit(t *testing.T) {
	defaults := options{
		mode: "real", scenario: "ratelimit", sessions: 2000, prompts: 3, rpm: 600, tpm: 200_000, highPercent: 20,
		maxTokens: 256, maxRetries: 1000, timeout: 20 * time.Minute, pacing: "both", pacingLimits: "configured",
		contenders: "peer,musepi", keys: 2, wire: "openai",
		// the flags' own defaults, which the ratelimit scenario leaves
		mix: defaultMix, usageLimit: true, budget: "off", baseDelay: 500 * time.Millisecond, maxDelay: 5 * time.Minute,
		passivate: musepi.DefaultPassivateAfter, seed: 1, provider: "fakellm", nodes: 3,
	}
	with := func(f func(o *options)) *options {
		o := defaults
		f(&o)
		return &o
	}
	rl := func(args ...string) []string { return append([]string{"-scenario", "ratelimit"}, args...) }
	for _, tc := range []struct {
		name   string
		args   []string
		want   *options
		errHas string
	}{
		{name: "defaults", args: rl(), want: with(func(*options) {})},
		{name: "real mode named", args: rl("-mode", "real"), want: with(func(*options) {})},
		{name: "cluster defaults", args: rl("-mode", "cluster"),
			want: with(func(o *options) { o.mode, o.contenders, o.pacing = "cluster", "cluster", "on" })},
		{name: "explicit values kept", args: rl("-sessions", "50", "-prompts", "2", "-rpm", "60", "-tpm", "0", "-high", "50",
			"-max-tokens", "64", "-max-retries", "5", "-timeout", "1m", "-pacing", "on", "-pacing-limits", "headers",
			"-contenders", "musepi", "-ramp", "2s", "-out", "x", "-quiet", "-keys", "1", "-wire", "anthropic",
			"-itpm", "1000", "-otpm", "500", "-window", "1s"),
			want: with(func(o *options) {
				o.sessions, o.prompts, o.rpm, o.tpm, o.highPercent = 50, 2, 60, 0, 50
				o.maxTokens, o.maxRetries, o.timeout, o.pacing, o.pacingLimits = 64, 5, time.Minute, "on", "headers"
				o.contenders, o.ramp, o.out, o.quiet, o.keys, o.wire = "musepi", 2*time.Second, "x", true, 1, "anthropic"
				o.itpm, o.otpm, o.window = 1000, 500, time.Second
			})},
		{name: "anthropic defaults", args: rl("-wire", "anthropic"),
			want: with(func(o *options) { o.wire, o.tpm, o.itpm, o.otpm = "anthropic", 0, 200_000, 40_000 })},
		{name: "anthropic with a total and a window", args: rl("-wire", "anthropic", "-tpm", "300000", "-otpm", "0", "-window", "10s"),
			want: with(func(o *options) {
				o.wire, o.tpm, o.itpm, o.otpm, o.window = "anthropic", 300_000, 200_000, 0, 10*time.Second
			})},
		{name: "openai over 10 s windows", args: rl("-window", "10s"), want: with(func(o *options) { o.window = 10 * time.Second })},
		{name: "no max_tokens", args: rl("-max-tokens", "0", "-sessions", "4", "-prompts", "10", "-tpm", "6000"),
			want: with(func(o *options) { o.maxTokens, o.sessions, o.prompts, o.tpm = 0, 4, 10, 6000 })},
		{name: "virtual mode", args: rl("-mode", "virtual"), errHas: `runs in -mode real or cluster`},
		{name: "both modes", args: rl("-mode", "both"), errHas: `runs in -mode real or cluster`},
		{name: "an outage flag", args: rl("-outage", "3s"), errHas: "-outage applies to -scenario outage only"},
		{name: "the budget", args: rl("-budget", "on"), errHas: "-budget applies to -scenario outage only"},
		{name: "a ratelimit flag in the outage", args: []string{"-prompts", "2"}, errHas: "-prompts applies to -scenario ratelimit only"},
		{name: "a ratelimit flag with -mode both", args: []string{"-mode", "both", "-rpm", "2"}, errHas: "-rpm applies to -scenario ratelimit only"},
		{name: "bad scenario", args: []string{"-scenario", "flood"}, errHas: `-scenario must be outage, ratelimit or overload, got "flood"`},
		{name: "no prompts", args: rl("-prompts", "0"), errHas: "-prompts must be 1 or more"},
		{name: "no sessions", args: rl("-sessions", "0"), errHas: "-sessions must be 1 or more"},
		{name: "no limits", args: rl("-rpm", "0", "-tpm", "0"), errHas: "-rpm, -tpm, -itpm or -otpm must be above 0"},
		{name: "anthropic without limits", args: rl("-wire", "anthropic", "-rpm", "0", "-itpm", "0", "-otpm", "0"),
			errHas: "-rpm, -tpm, -itpm or -otpm must be above 0"},
		{name: "negative rpm", args: rl("-rpm", "-1"), errHas: "-rpm must be 0-"},
		{name: "otpm too large", args: rl("-wire", "anthropic", "-otpm", "1000000001"), errHas: "-otpm must be 0-1000000000"},
		{name: "itpm on openai", args: rl("-itpm", "1000"), errHas: "-itpm and -otpm apply to -wire anthropic only"},
		{name: "a window over the minute", args: rl("-window", "61s"), errHas: "-window must be whole ms from 0 to 1m"},
		{name: "a window in µs", args: rl("-window", "1500us"), errHas: "-window must be whole ms from 0 to 1m"},
		{name: "a negative window", args: rl("-window", "-1s"), errHas: "-window must be whole ms from 0 to 1m"},
		{name: "high over 100", args: rl("-high", "101"), errHas: "-high must be 0-100"},
		{name: "bad pacing", args: rl("-pacing", "maybe"), errHas: `-pacing must be off, on or both`},
		{name: "bad limits source", args: rl("-pacing-limits", "guess"), errHas: `-pacing-limits must be headers or configured`},
		{name: "negative max tokens", args: rl("-max-tokens", "-1"), errHas: "-max-tokens must not be negative"},
		{name: "anthropic without max tokens", args: rl("-wire", "anthropic", "-max-tokens", "0"), errHas: "-wire anthropic needs -max-tokens above 0"},
		{name: "no keys", args: rl("-keys", "0"), errHas: "-keys must be 1-26"},
		{name: "too many keys", args: rl("-keys", "27"), errHas: "-keys must be 1-26"},
		{name: "bad wire", args: rl("-wire", "grpc"), errHas: `-wire must be openai or anthropic, got "grpc"`},
		{name: "a ratelimit flag in the outage: -wire", args: []string{"-wire", "anthropic"}, errHas: "-wire applies to -scenario ratelimit only"},
		{name: "no timeout", args: rl("-timeout", "0"), errHas: "-timeout must be above 0"},
		{name: "the floor", args: rl("-contenders", "floor,peer"), errHas: `unknown contender "floor" in the ratelimit scenario`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args, io.Discard)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("parseFlags(%q): error %v, want one containing %q", tc.args, err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseFlags(%q): %v", tc.args, err)
			}
			if !reflect.DeepEqual(o, tc.want) {
				t.Errorf("parseFlags(%q) =\n %+v\nwant\n %+v", tc.args, *o, *tc.want)
			}
		})
	}
}
