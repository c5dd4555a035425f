// Package protoname turns Go field names into protobuf field names and
// back, as the generators of the runtime's wire code (genrecord, genevent)
// and protoc-gen-go name them.
package protoname

import (
	"strings"
	"unicode"
)

// Snake is "PrimaryUntil" as "primary_until" ("HistorySeq": "history_seq").
func Snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Camel is a protobuf name as protoc-gen-go names its Go field
// ("primary_until": "PrimaryUntil").
func Camel(s string) string {
	var b strings.Builder
	for _, part := range strings.Split(s, "_") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}
