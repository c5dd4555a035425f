package fakellm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"
)

// obj is a JSON object that keeps its keys in order: key, value, key,
// value... so the wire output reads like the real APIs' ("type" first).
type obj []any

func (o obj) MarshalJSON() ([]byte, error) {
	if len(o)%2 != 0 {
		return nil, fmt.Errorf("fakellm: odd obj")
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i := 0; i < len(o); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(o[i])
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(o[i+1])
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// eventFrame is one SSE event with an event name.
func eventFrame(name string, v any) []byte {
	return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", name, mustJSON(v))
}

// dataFrame is one SSE event without a name (OpenAI chat).
func dataFrame(v any) []byte {
	return fmt.Appendf(nil, "data: %s\n\n", mustJSON(v))
}

var doneFrame = []byte("data: [DONE]\n\n")

// nullable renders "" as JSON null.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (s *Server) setCommonHeaders(w http.ResponseWriter, api string, extra map[string]string) string {
	h := w.Header()
	id := s.requestID()
	if isAnthropic(api) {
		h.Set("Request-Id", id)
	} else {
		h.Set("X-Request-Id", id)
		h.Set("Openai-Processing-Ms", "1")
		h.Set("Openai-Version", "2020-10-01")
	}
	for k, v := range extra {
		h.Set(k, v)
	}
	return id
}

// writeError writes an HTTP error in the API's real shape.
func (s *Server) writeError(w http.ResponseWriter, api string, e errSpec, headers map[string]string) {
	reqID := s.setCommonHeaders(w, api, headers)
	var body any
	if isAnthropic(api) {
		body = obj{"type", "error", "error", obj{"type", e.typ, "message", e.msg}, "request_id", reqID}
	} else {
		body = obj{"error", obj{"message", e.msg, "type", e.typ, "param", nullable(e.param), "code", nullable(e.code)}}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_, _ = w.Write(append(mustJSON(body), '\n'))
}

func startSSE(w http.ResponseWriter) *http.ResponseController {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	return rc
}

// writeStreamError answers 200 and an in-stream error event, after the
// stream's opening events when opened (the stream starts, then fails
// before any content), then ends the body.
func (s *Server) writeStreamError(w http.ResponseWriter, req *apiRequest, e errSpec, headers map[string]string, opened bool) {
	s.setCommonHeaders(w, req.api, headers)
	rc := startSSE(w)
	for _, f := range s.streamErrorFrames(req, e, opened) {
		_, _ = w.Write(f)
	}
	_ = rc.Flush()
}

// streamErrorFrames are the frames of an in-stream error: the API's
// opening events when opened, then its error event.
func (s *Server) streamErrorFrames(req *apiRequest, e errSpec, opened bool) [][]byte {
	var frames [][]byte
	switch req.api {
	case APIAnthropic:
		if opened {
			frames = anthropicOpening(req, s.letterID("msg_fakellm"))
		}
		return append(frames, eventFrame("error", obj{"type", "error", "error", obj{"type", e.typ, "message", e.msg}}))
	case APIOpenAIResponses:
		ev := &responsesEvents{}
		if opened {
			ev.open(req, &content{}, s.responseID(), now())
		}
		code := e.code
		if code == "" {
			code = e.typ
		}
		ev.event("error", "code", code, "message", e.msg, "param", nullable(e.param))
		return ev.cur
	default:
		if opened {
			frames = append(frames, s.chatChunks(req).opening())
		}
		return append(frames, dataFrame(obj{"error", obj{"message", e.msg, "type", e.typ, "param", nullable(e.param), "code", nullable(e.code)}}))
	}
}

// pacing is how a stream is delivered over time.
type pacing struct {
	cutAfter   int // -1: never
	stallMs    int
	stallAfter int
	chunkDelay int
}

func pacingOf(r *Respond) pacing {
	p := pacing{cutAfter: -1, stallMs: r.StallMs, stallAfter: r.StallAfter, chunkDelay: r.ChunkDelayMs}
	if r.CutAfter != nil {
		p.cutAfter = *r.CutAfter
	}
	return p
}

// steps is a stream cut into delivery steps: steps[i] (i < last) holds
// the frames up to and including content chunk i; the last step holds the
// terminating frames.
type steps [][][]byte

type stepBuilder struct {
	out steps
	cur [][]byte
}

func (b *stepBuilder) add(frame []byte) { b.cur = append(b.cur, frame) }

// chunk ends the current step after a content chunk.
func (b *stepBuilder) chunk() {
	b.out = append(b.out, b.cur)
	b.cur = nil
}

// eachChunk makes one content chunk of each piece: emit adds the piece's
// frames, then the step ends.
func (b *stepBuilder) eachChunk(pieces []string, emit func(piece string)) {
	for _, p := range pieces {
		emit(p)
		b.chunk()
	}
}

func (b *stepBuilder) finish() steps {
	b.out = append(b.out, b.cur)
	b.cur = nil
	return b.out
}

// runStream delivers st with pacing p. beforeLast runs just before the
// terminating frames are written (a Responses id must be known before the
// client can read response.completed).
func (s *Server) runStream(ctx context.Context, w http.ResponseWriter, api string, headers map[string]string, st steps, p pacing, beforeLast func()) {
	s.setCommonHeaders(w, api, headers)
	rc := startSSE(w)
	last := len(st) - 1
	for i, frames := range st {
		if i > 0 && p.chunkDelay > 0 && !sleep(ctx, ms(p.chunkDelay)) {
			return
		}
		if p.stallMs > 0 && i == min(p.stallAfter, last) && !sleep(ctx, ms(p.stallMs)) {
			return
		}
		if p.cutAfter >= 0 && i == min(p.cutAfter, last) {
			dropConnection(w, rc)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if i == last && beforeLast != nil {
			beforeLast()
		}
		for _, f := range frames {
			if _, err := w.Write(f); err != nil {
				return
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// dropConnection closes the TCP connection under the response abruptly:
// no terminating chunk, no closing events. Where the connection cannot be
// hijacked (HTTP/2), the handler aborts, which resets the stream. What
// was flushed before stays delivered; a response whose headers were not
// sent yet ends before its status line.
func dropConnection(w http.ResponseWriter, rc *http.ResponseController) {
	conn, _, err := rc.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// content is a stream's output cut into chunks.
type content struct {
	reasoningField string            // Chat: the delta field thinking streams in
	stopDetails    map[string]string // a refusal's stop_details (Chat, Anthropic)
	stopError      string            // a refusal's error text (Chat)
	thinking       string
	text           string // text, or the refusal text
	tool           *ToolCall
	args           string
	stop           string // canonical stop
	thinkingC      []string
	textC          []string
	argsC          []string
}

func planContent(r *Respond) content {
	n := r.Chunks
	if n == 0 {
		n = 3
	}
	c := content{thinking: r.Thinking, text: r.Text, tool: r.ToolCall,
		reasoningField: r.ReasoningField, stopDetails: r.StopDetails, stopError: r.StopError}
	if c.reasoningField == "" {
		c.reasoningField = "reasoning_content"
	}
	if r.Refusal != "" {
		c.text = r.Refusal
	}
	c.thinkingC = split(c.thinking, n)
	c.textC = split(c.text, n)
	if c.tool != nil {
		c.args = c.tool.Arguments
		if c.args == "" {
			c.args = "{}"
		}
		c.argsC = split(c.args, n)
	}
	switch {
	case r.Stop != "":
		c.stop = stopNames[r.Stop]
	case r.Refusal != "":
		c.stop = stopRefusal
	case c.tool != nil:
		c.stop = stopTool
	default:
		c.stop = stopEnd
	}
	return c
}

// outputTokens is a rough token count of the output.
func (c *content) outputTokens() int {
	return max(1, (len(c.thinking)+len(c.text)+len(c.args))/4)
}

// split cuts s into n pieces of nearly equal rune counts (fewer when s is
// shorter than n runes).
func split(s string, n int) []string {
	if s == "" {
		return nil
	}
	runes := utf8.RuneCountInString(s)
	if n > runes {
		n = runes
	}
	out := make([]string, 0, n)
	base, extra := runes/n, runes%n
	rest := s
	for i := range n {
		size := base
		if i < extra {
			size++
		}
		cut := 0
		for range size {
			_, w := utf8.DecodeRuneInString(rest[cut:])
			cut += w
		}
		out = append(out, rest[:cut])
		rest = rest[cut:]
	}
	return out
}

// writeStream streams resp in the request's API format.
func (s *Server) writeStream(ctx context.Context, w http.ResponseWriter, req *apiRequest, resp *Respond) {
	c := planContent(resp)
	var (
		st         steps
		beforeLast func()
	)
	switch req.api {
	case APIAnthropic:
		st = s.anthropicSteps(req, &c)
	case APIOpenAIResponses:
		var id string
		st, id = s.responsesSteps(req, &c)
		if req.Store == nil || *req.Store {
			beforeLast = func() { s.remember(id) }
		}
	default:
		st = s.chatSteps(req, &c)
	}
	s.runStream(ctx, w, req.api, resp.Headers, st, pacingOf(resp), beforeLast)
}

// writeFull answers a non-streaming request with the whole object. A stall
// delays it; cut_after drops the connection before any response.
func (s *Server) writeFull(ctx context.Context, w http.ResponseWriter, req *apiRequest, resp *Respond) {
	c := planContent(resp)
	if resp.StallMs > 0 && !sleep(ctx, ms(resp.StallMs)) {
		return
	}
	if resp.CutAfter != nil {
		dropConnection(w, http.NewResponseController(w))
		return
	}
	var body any
	switch req.api {
	case APIAnthropic:
		body = s.anthropicMessage(req, &c)
	case APIOpenAIResponses:
		id := s.responseID()
		body = s.responsesFull(req, &c, id)
		if req.Store == nil || *req.Store {
			s.remember(id)
		}
	default:
		body = s.chatCompletion(req, &c)
	}
	s.setCommonHeaders(w, req.api, resp.Headers)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(mustJSON(body), '\n'))
}

func now() int64 { return time.Now().Unix() }
