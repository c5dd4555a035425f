package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
)

// Stop-detail types this adapter sets (the retry classifier reads them).
const (
	stopDetailRefusal     = "refusal"
	stopDetailInterrupted = "stream_interrupted_after_content"
)

// maxRawBody bounds how much of a non-JSON error body goes into an error text.
const maxRawBody = 2048

// httpErrorText formats an HTTP error as
// "<status> <status text>: <error.type>: <error.message>", keeping the
// provider's type and message verbatim for the classifier; a body that is
// not Anthropic's error JSON is quoted raw (truncated).
func httpErrorText(aerr *sdk.Error, status int) string {
	head := strings.TrimSpace(fmt.Sprintf("%d %s", status, http.StatusText(status)))
	typ, msg := errorBody(aerr)
	if detail := joinNonEmpty(": ", typ, msg); detail != "" {
		return head + ": " + detail
	}
	if raw := strings.TrimSpace(rawBody(aerr)); raw != "" {
		return head + ": " + truncate(raw, maxRawBody)
	}
	return head
}

// errorBody returns error.type and error.message of an API error body
// ({"type":"error","error":{"type":...,"message":...}}). It also accepts the
// shapes proxies use: {"error":"text"} and {"message":"text"}.
func errorBody(aerr *sdk.Error) (typ, msg string) {
	raw := rawBody(aerr)
	var body struct {
		Error   json.RawMessage `json:"error"`
		Message any             `json:"message"`
	}
	if json.Unmarshal([]byte(raw), &body) == nil {
		var inner struct {
			Type    any `json:"type"`
			Message any `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(body.Error, &inner) == nil:
			typ, msg = scalar(inner.Type), scalar(inner.Message)
		case json.Unmarshal(body.Error, &s) == nil:
			msg = s
		}
		if msg == "" {
			msg = scalar(body.Message)
		}
	}
	if typ == "" {
		typ = string(aerr.Type())
	}
	if msg == "" {
		msg = aerr.Message
	}
	return strings.TrimSpace(typ), strings.TrimSpace(msg)
}

// rawBody is the body of the error response (or the data of an error event).
func rawBody(aerr *sdk.Error) string {
	if raw := aerr.RawJSON(); raw != "" {
		return raw
	}
	// The SDK puts the read body back on the response for debugging.
	if aerr.Response != nil && aerr.Response.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(aerr.Response.Body, 64<<10))
		aerr.Response.Body = io.NopCloser(bytes.NewReader(b))
		return string(b)
	}
	return ""
}

// scalar renders a JSON string or number; anything else is "".
func scalar(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return fmt.Sprint(v)
	}
	return ""
}

// headersOf returns the response headers with lower-case names, first value
// of each; nil without a response.
func headersOf(resp *http.Response) map[string]string {
	if resp == nil || len(resp.Header) == 0 {
		return nil
	}
	h := make(map[string]string, len(resp.Header))
	for k, v := range resp.Header {
		if len(v) > 0 {
			h[strings.ToLower(k)] = v[0]
		}
	}
	return h
}

func joinNonEmpty(sep string, parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		if p == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(sep)
		}
		b.WriteString(p)
	}
	return b.String()
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
