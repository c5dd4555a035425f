package provider

import "fmt"

// ThinkingLevel is how much a turn should reason, in pi's levels. The zero
// value is off: the provider's own default (no reasoning setting sent).
type ThinkingLevel string

// The thinking levels.
const (
	ThinkingOff     ThinkingLevel = ""
	ThinkingMinimal ThinkingLevel = "minimal"
	ThinkingLow     ThinkingLevel = "low"
	ThinkingMedium  ThinkingLevel = "medium"
	ThinkingHigh    ThinkingLevel = "high"
	ThinkingXHigh   ThinkingLevel = "xhigh"
)

// thinkingBudgets are the Anthropic budget_tokens of each level, as pi-ai
// sets them (xhigh is high).
var thinkingBudgets = map[ThinkingLevel]int64{
	ThinkingMinimal: 1024, ThinkingLow: 2048, ThinkingMedium: 8192, ThinkingHigh: 16384, ThinkingXHigh: 16384,
}

// ParseThinkingLevel reads pi's level names: "off", "minimal", "low",
// "medium", "high", "xhigh".
func ParseThinkingLevel(s string) (ThinkingLevel, error) {
	if s == "off" {
		return ThinkingOff, nil
	}
	if _, ok := thinkingBudgets[ThinkingLevel(s)]; ok {
		return ThinkingLevel(s), nil
	}
	return "", fmt.Errorf("thinking level %q: want off, minimal, low, medium, high or xhigh", s)
}

// Effort is the OpenAI reasoning effort of the level ("minimal", "low",
// "medium", "high"; xhigh is high); "" when off.
func (l ThinkingLevel) Effort() string {
	if l == ThinkingXHigh {
		return string(ThinkingHigh)
	}
	return string(l)
}

// Budget is the Anthropic thinking budget_tokens of the level; 0 when off.
func (l ThinkingLevel) Budget() int64 { return thinkingBudgets[l] }
