package config

import (
	"sort"
	"strings"
)

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Key is the TOML key the problem is about, as a path with array
	// indexes: "providers.openai.credentials[1].api_key_env",
	// "retry.max_retries". It is "" for a TOML syntax error.
	Key string
	// Message says what is wrong, such as "must be 0 or more, got -1". It
	// never holds the value of an environment variable.
	Message string
}

func (p Problem) String() string {
	if p.Key == "" {
		return p.Message
	}
	return p.Key + ": " + p.Message
}

// Error is every problem Parse, Load or Validate found, sorted by key.
type Error struct {
	// File is the configuration file's name: as given to Load, the
	// Config's File for Validate and RuntimeOptions, "" after Parse.
	File     string
	Problems []Problem
}

// Error returns one line per problem, each prefixed with the file name
// when there is one:
//
//	musepi.toml: retry.max_retries: must be 0 or more, got -1
func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		if e.File != "" {
			b.WriteString(e.File)
			b.WriteString(": ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// newError returns nil when there are no problems, else an *Error with
// them sorted by key (natural order, so credentials[2] precedes
// credentials[10]); problems on the same key keep their order.
func newError(file string, probs []Problem) error {
	if len(probs) == 0 {
		return nil
	}
	sorted := append([]Problem(nil), probs...)
	sort.SliceStable(sorted, func(i, j int) bool { return naturalLess(sorted[i].Key, sorted[j].Key) })
	return &Error{File: file, Problems: sorted}
}

// naturalLess compares a and b with runs of ASCII digits compared as
// numbers.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digitRun(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}
