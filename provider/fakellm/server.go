package fakellm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxBody bounds a request body.
const maxBody = 32 << 20

// Server is the fake LLM server: an http.Handler that answers the OpenAI
// Chat Completions, OpenAI Responses and Anthropic Messages APIs as its
// Scenario says. It is safe for concurrent use.
type Server struct {
	mu        sync.Mutex
	sc        *Scenario
	firstUsed map[int]int // rule index -> requests it answered under "first"
	clock     func() time.Time
	start     time.Time       // the clock's origin: from_ms/to_ms and by_window count from it
	known     map[string]bool // Responses ids issued and not forgotten
	limits    map[limitKey]*limitState
	loads     map[string]*loadState // by model: calls in flight (they outlive a SetScenario)
	stats     statsState

	ids    atomic.Uint64 // for every generated id
	active atomic.Int64  // API requests being answered

	closeCtx  context.Context
	closeFn   context.CancelFunc
	closed    bool
	handlers  sync.WaitGroup
	hs        *http.Server
	serveDone chan struct{}
}

// New returns a server playing sc (nil: every call streams DefaultText).
// The clock starts now.
func New(sc *Scenario) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		sc:        sc,
		firstUsed: map[int]int{},
		clock:     time.Now,
		start:     time.Now(),
		known:     map[string]bool{},
		limits:    map[limitKey]*limitState{},
		loads:     map[string]*loadState{},
		closeCtx:  ctx,
		closeFn:   cancel,
	}
	s.stats.reset()
	return s
}

// SetScenario swaps the scenario at run time; the "first" counters start
// over and the rate-limit buckets start full. Requests already being
// answered keep their old answer. A hand-built scenario should pass
// Validate first.
func (s *Server) SetScenario(sc *Scenario) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sc = sc
	s.firstUsed = map[int]int{}
	s.limits = map[limitKey]*limitState{}
}

// ResetClock restarts the time windows (from_ms/to_ms) at 0, clears the
// per-window stats, whose t_ms counts from the same origin, and fills
// every rate-limit bucket.
func (s *Server) ResetClock() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetClock()
}

// resetClock is ResetClock; the caller holds s.mu.
func (s *Server) resetClock() {
	s.start = s.clock()
	s.stats.windows = map[int64]*Window{}
	s.limits = map[limitKey]*limitState{}
}

// SetClock makes now the server's clock (time.Now by default) and restarts
// it as ResetClock does. Time windows, by_window stats and the rate-limit
// buckets read it, so tests can move time without sleeping; delays, stalls
// and timeouts still take real time. now must be safe for concurrent use;
// nil restores time.Now.
func (s *Server) SetClock(now func() time.Time) {
	if now == nil {
		now = time.Now
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock = now
	s.resetClock()
}

// elapsedMs is the time on the server's clock since its origin, in ms; the
// caller holds s.mu.
func (s *Server) elapsedMs() int64 { return s.clock().Sub(s.start).Milliseconds() }

// Start listens on addr ("127.0.0.1:0" when empty) and serves in the
// background. It returns the base URL, such as "http://127.0.0.1:41234"
// (OpenAI clients add "/v1"). A Server starts at most once.
func (s *Server) Start(addr string) (string, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", errors.New("fakellm: server closed")
	}
	if s.hs != nil {
		s.mu.Unlock()
		return "", errors.New("fakellm: server already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		s.mu.Unlock()
		return "", err
	}
	s.hs = &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	s.serveDone = make(chan struct{})
	hs, done := s.hs, s.serveDone
	s.mu.Unlock()
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
	return "http://" + ln.Addr().String(), nil
}

// Close stops the listener, ends every open stream and connection, and
// returns once every handler has returned. It is safe to call more than
// once; later requests to the handler get 503.
func (s *Server) Close() error {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	hs, done := s.hs, s.serveDone
	s.mu.Unlock()
	s.closeFn()
	var err error
	if hs != nil {
		if first {
			err = hs.Close()
		}
		<-done
	}
	s.handlers.Wait()
	return err
}

// ServeHTTP routes the API endpoints and /stats.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.admit(w) {
		return
	}
	defer s.handlers.Done()

	// The request ends when the client goes away or the server closes.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.closeCtx, cancel)
	defer stop()

	path := strings.TrimSuffix(r.URL.Path, "/")
	if s.serveControl(w, r, path) {
		return
	}
	api := apiAt(path)
	if api == "" {
		s.writeError(w, APIOpenAIChat, errSpec{status: http.StatusNotFound, typ: "invalid_request_error",
			code: "unknown_url", msg: fmt.Sprintf("Unknown request URL: %s %s.", r.Method, r.URL.Path)}, nil)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.writeError(w, api, errSpec{status: http.StatusMethodNotAllowed, typ: "invalid_request_error",
			msg: fmt.Sprintf("Invalid method for URL (%s %s)", r.Method, r.URL.Path)}, nil)
		return
	}
	s.handleAPI(ctx, w, r, api)
}

// admit counts a request among the running handlers, or answers 503 and
// reports false once the server is closed.
func (s *Server) admit(w http.ResponseWriter) bool {
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.handlers.Add(1)
	}
	s.mu.Unlock()
	if closed {
		w.Header().Set("Connection", "close")
		http.Error(w, "fakellm: server closed", http.StatusServiceUnavailable)
	}
	return !closed
}

// apiAt is the API served at path (without a trailing slash), or "" for
// none.
func apiAt(path string) string {
	switch path {
	case "/v1/chat/completions", "/chat/completions":
		return APIOpenAIChat
	case "/v1/responses", "/responses":
		return APIOpenAIResponses
	case "/v1/messages", "/messages":
		return APIAnthropic
	}
	return ""
}

// serveControl answers the control endpoints (/stats, /stats/reset,
// /clock/reset); false when path is none of them.
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request, path string) bool {
	switch path {
	case "/stats":
		if allowMethod(w, r, http.MethodGet) {
			writeJSON(w, http.StatusOK, s.Stats())
		}
	case "/stats/reset":
		if allowMethod(w, r, http.MethodPost) {
			s.ResetStats()
			writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
		}
	case "/clock/reset":
		if allowMethod(w, r, http.MethodPost) {
			s.ResetClock()
			writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
		}
	default:
		return false
	}
	return true
}

// allowMethod reports whether r uses method, answering 405 when it does
// not.
func allowMethod(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method != method {
		methodNotAllowed(w, method)
		return false
	}
	return true
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// apiRequest is the part of a request body the server looks at.
type apiRequest struct {
	api string
	key string

	Model              string `json:"model"`
	Stream             bool   `json:"stream"`
	PreviousResponseID string `json:"previous_response_id"`
	Store              *bool  `json:"store"`
	MaxTokens          *int64 `json:"max_tokens"`
	// The output limits of Chat (max_tokens is its older name) and
	// Responses, for the rate limits.
	MaxCompletionTokens *int64 `json:"max_completion_tokens"`
	MaxOutputTokens     *int64 `json:"max_output_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`

	inputTokens int
}

// apiKey reads the key the way each API sends it. Anthropic also accepts
// a bearer token (OAuth-style clients).
func apiKey(r *http.Request, api string) string {
	bearer := ""
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		bearer = strings.TrimSpace(h[7:])
	}
	if api == APIAnthropic {
		if k := r.Header.Get("X-Api-Key"); k != "" {
			return k
		}
	}
	return bearer
}

// Labels for requests no rule answered.
const (
	labelDefault   = "default"
	labelInvalid   = "(invalid)"
	labelRateLimit = "(rate_limit)"
)

// handleAPI answers one request of api: a request the real API would
// refuse gets its error; any other, the respond its scenario chooses.
func (s *Server) handleAPI(ctx context.Context, w http.ResponseWriter, r *http.Request, api string) {
	s.active.Add(1)
	defer s.active.Add(-1)
	req := &apiRequest{api: api, key: apiKey(r, api)}
	if spec, bad := readRequest(w, r, req); bad {
		s.reject(w, req, spec)
		return
	}
	a := s.decide(req)
	defer s.releaseCapacity(a.load)
	status, failed := a.status()
	s.record(req, a.label, status, failed)
	if a.grant != nil {
		defer s.settle(a.grant, a.outputTokens())
	}
	for k, v := range a.rateHeaders {
		w.Header().Set(k, v)
	}

	resp := a.resp
	if resp.DelayMs > 0 && !sleep(ctx, ms(resp.DelayMs)) {
		return
	}
	switch {
	case a.errOut != nil:
		s.writeError(w, api, *a.errOut, resp.Headers)
	case a.streamErr != nil:
		s.writeStreamError(w, req, *a.streamErr, resp.Headers, a.load.midStream)
	case req.Stream:
		s.writeStream(ctx, w, req, resp)
	default:
		s.writeFull(ctx, w, req, resp)
	}
}

// answer is how the server answers one request, decided before anything
// of it is sent.
type answer struct {
	resp              *Respond
	label             string   // the stats' rule label
	errOut, streamErr *errSpec // an HTTP error, an in-stream error (nil: none)
	// rateHeaders are the rate-limit headers (and a refusal's retry
	// hints); the respond's own headers are set after them and win.
	rateHeaders map[string]string
	grant       *rateGrant // what the rate limits took, settled once answered
	load        load       // the place the capacity gave, or its refusal
}

// decide chooses the answer to req. The scenario decides first (its
// rules, then the stale-response check); an answer that would succeed
// must then find a place in its model's capacity, or becomes the
// provider's overload answer, and fit in the rate limits, or becomes
// their 429. Errors take nothing from the buckets, and hold no place.
func (s *Server) decide(req *apiRequest) *answer {
	resp, label := s.choose(req)
	a := &answer{resp: resp, label: label}
	a.errOut, a.streamErr = s.outcome(req, resp)
	if a.errOut == nil && a.streamErr == nil {
		a.load = s.takeCapacity(req)
	}
	if a.errOut != nil || a.streamErr != nil || a.load.refused {
		if a.load.refused {
			a.overloaded(req)
		}
		a.rateHeaders = s.peekRate(req)
		return a
	}
	var refused *errSpec
	a.grant, refused, a.rateHeaders = s.takeRate(req)
	if refused != nil {
		s.releaseCapacity(a.load)
		a.load = load{}
		a.resp, a.label, a.errOut = &Respond{}, labelRateLimit, refused
		return a
	}
	a.resp = a.load.slowed(a.resp)
	return a
}

// overloaded makes a the provider's overload answer to req: the
// "overloaded" preset's error (Anthropic 529 overloaded_error, OpenAI 503),
// inside the stream when the load says so.
func (a *answer) overloaded(req *apiRequest) {
	e := resolveError(req.api, &Respond{Preset: "overloaded"}, req)
	a.resp, a.label = &Respond{}, labelOverloaded
	if a.load.midStream {
		a.streamErr = &e
	} else {
		a.errOut = &e
	}
}

// status is the answer's HTTP status, and whether the stats count it as
// an error.
func (a *answer) status() (int, bool) {
	switch {
	case a.errOut != nil:
		return a.errOut.status, a.errOut.status >= 400
	case a.streamErr != nil, a.resp.CutAfter != nil:
		return http.StatusOK, true
	}
	return http.StatusOK, false
}

// outputTokens is the output the answer's usage reports.
func (a *answer) outputTokens() int {
	c := planContent(a.resp)
	return c.outputTokens()
}

// readRequest reads the request's body into req and checks it as the real API
// does; bad says it is refused, with spec's error.
func readRequest(w http.ResponseWriter, r *http.Request, req *apiRequest) (spec errSpec, bad bool) {
	api := req.api
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errSpec{status: 413, typ: tooLargeType(api), msg: "Request exceeds the maximum allowed number of bytes."}, true
		}
		return errSpec{status: 400, typ: "invalid_request_error", msg: "Could not read the request body: " + err.Error()}, true
	}
	req.inputTokens = max(1, len(body)/4)
	if err := json.Unmarshal(body, req); err != nil {
		msg := "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)"
		if isAnthropic(api) {
			msg = "There was an error parsing the body of your request: " + err.Error()
		}
		return errSpec{status: 400, typ: "invalid_request_error", msg: msg}, true
	}
	switch {
	case req.key == "" && isAnthropic(api):
		return errSpec{status: 401, typ: "authentication_error", msg: "x-api-key header is required"}, true
	case req.key == "":
		return errSpec{status: 401, typ: "invalid_request_error",
			msg: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY). You can obtain an API key from https://platform.openai.com/account/api-keys."}, true
	case isAnthropic(api) && r.Header.Get("Anthropic-Version") == "":
		return errSpec{status: 400, typ: "invalid_request_error", msg: "anthropic-version: header is required"}, true
	case req.Model == "" && isAnthropic(api):
		return errSpec{status: 400, typ: "invalid_request_error", msg: "model: Field required"}, true
	case req.Model == "":
		return errSpec{status: 400, typ: "invalid_request_error", param: "model", msg: "you must provide a model parameter"}, true
	case isAnthropic(api) && req.MaxTokens == nil:
		return errSpec{status: 400, typ: "invalid_request_error", msg: "max_tokens: Field required"}, true
	}
	return errSpec{}, false
}

// outcome decides, before it is recorded, how the request ends: with an
// HTTP error (errOut), an error inside the stream (streamErr), or neither.
func (s *Server) outcome(req *apiRequest, resp *Respond) (errOut, streamErr *errSpec) {
	api := req.api
	switch resp.kind() {
	case kindError:
		e := resolveError(api, resp, req)
		return &e, nil
	case kindStreamError:
		e := streamErrorSpec(api, resp, req)
		if req.Stream {
			return nil, &e
		}
		return &e, nil
	case kindStream:
		if api == APIOpenAIResponses && req.PreviousResponseID != "" && !s.checkPrevious(req.PreviousResponseID, resp.ForgetPrevious) {
			e := resolveError(api, &Respond{Preset: "stale_response"}, req)
			return &e, nil
		}
	}
	return nil, nil
}

func tooLargeType(api string) string {
	if isAnthropic(api) {
		return "request_too_large"
	}
	return "invalid_request_error"
}

// reject answers a request that failed the server's own checks.
func (s *Server) reject(w http.ResponseWriter, req *apiRequest, e errSpec) {
	s.record(req, labelInvalid, e.status, true)
	s.writeError(w, req.api, e, s.peekRate(req))
}

// choose picks the answer for req: the first matching rule, else the
// default. A stream without content borrows the default's content.
func (s *Server) choose(req *apiRequest) (*Respond, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.sc
	if sc == nil {
		sc = &Scenario{}
	}
	chosen, label := s.matchRule(sc, req, s.elapsedMs())
	if chosen == nil {
		chosen, label = sc.Default, labelDefault
		if chosen == nil {
			chosen = &Respond{}
		}
	}
	return withContent(chosen, sc.Default), label
}

// matchRule is the respond and label of the first rule of sc that answers
// req at elapsed ms, counting it against its "first" limit; nil when none
// does. The caller holds s.mu.
func (s *Server) matchRule(sc *Scenario, req *apiRequest, elapsed int64) (*Respond, string) {
	for i := range sc.Rules {
		rule := &sc.Rules[i]
		m := &rule.Match
		if !m.matches(req, elapsed) {
			continue
		}
		if m.First > 0 {
			if s.firstUsed[i] >= m.First {
				continue
			}
			s.firstUsed[i]++
		}
		return &rule.Respond, rule.label(i)
	}
	return nil, ""
}

// matches reports whether req, elapsed ms into the run, fits every field
// of the match but First.
func (m *Match) matches(req *apiRequest, elapsed int64) bool {
	return (m.API == "" || m.API == req.api) &&
		(m.Key == "" || m.Key == req.key) &&
		(m.Model == "" || m.Model == req.Model) &&
		elapsed >= m.FromMs &&
		(m.ToMs <= 0 || elapsed < m.ToMs)
}

// label is the rule's name in the stats: its Name, else "rules[<i>]".
func (rule *Rule) label(i int) string {
	if rule.Name == "" {
		return fmt.Sprintf("rules[%d]", i)
	}
	return rule.Name
}

// withContent is resp, or for a stream without content a copy that says
// what the default stream says (DefaultText when the default says
// nothing).
func withContent(resp, def *Respond) *Respond {
	if resp.kind() != kindStream || resp.hasContent() {
		return resp
	}
	c := *resp
	switch {
	case def != nil && def.kind() == kindStream && def.hasContent():
		c.Text, c.Thinking, c.ToolCall, c.Refusal = def.Text, def.Thinking, def.ToolCall, def.Refusal
		if c.Stop == "" {
			c.Stop = def.Stop
		}
		if c.Chunks == 0 {
			c.Chunks = def.Chunks
		}
	default:
		c.Text = DefaultText
	}
	return &c
}

// checkPrevious reports whether a Responses previous_response_id is known;
// with forget it first forgets it (and so reports false).
func (s *Server) checkPrevious(id string, forget bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if forget {
		delete(s.known, id)
		return false
	}
	return s.known[id]
}

func (s *Server) remember(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.known[id] = true
}

// Forget makes the server treat a Responses id as unknown from now on.
func (s *Server) Forget(responseID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.known, responseID)
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// sleep waits d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// nextID returns a fresh number for generated ids.
func (s *Server) nextID() uint64 { return s.ids.Add(1) }

// requestID is an id made of letters only, so that no status-like number
// ever shows up in an error text that quotes it.
func (s *Server) requestID() string { return s.letterID("req_fakellm") }

// letterID is prefix followed by a fresh letters-only suffix.
func (s *Server) letterID(prefix string) string {
	n := s.nextID()
	var b [10]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('a' + n%26)
		n /= 26
	}
	return prefix + string(b[:])
}

// responseID is a fresh Responses API id, "resp_<n>".
func (s *Server) responseID() string { return fmt.Sprintf("resp_%d", s.nextID()) }
