package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/pacing"
	"github.com/musepi/musepi/provider"
)

var handlers = map[string]handler{
	"prompt":                  (*Server).prompt,
	"steer":                   (*Server).steer,
	"follow_up":               (*Server).followUp,
	"abort":                   (*Server).abort,
	"abort_retry":             (*Server).abortRetry,
	"set_auto_retry":          (*Server).setAutoRetry,
	"get_state":               (*Server).getState,
	"get_messages":            (*Server).getMessages,
	"set_model":               (*Server).setModel,
	"cycle_model":             (*Server).cycleModel,
	"get_available_models":    (*Server).availableModels,
	"set_thinking_level":      (*Server).setThinkingLevel,
	"cycle_thinking_level":    (*Server).cycleThinkingLevel,
	"set_steering_mode":       (*Server).setSteeringMode,
	"set_follow_up_mode":      (*Server).setFollowUpMode,
	"get_session_stats":       (*Server).sessionStats,
	"get_last_assistant_text": (*Server).lastAssistantText,
	"set_session_name":        (*Server).setSessionName,
	"get_commands":            (*Server).commands,
	"new_session":             (*Server).newSession,
	"switch_session":          (*Server).switchSession,
	"compact":                 (*Server).compact,
	"set_auto_compaction":     (*Server).setAutoCompaction,
}

// unsupported are pi's commands MusePi does not offer: they answer
// success: false with "<command> is not supported by MusePi".
var unsupported = map[string]struct{}{
	"bash": {}, "abort_bash": {}, "export_html": {},
	"fork": {}, "clone": {}, "get_fork_messages": {},
}

// prefs are what the client set for the session.
type prefs struct {
	thinking     string // pi's ThinkingLevel; "" reads "off"
	steeringMode string // "all" or "one-at-a-time"; "" reads "one-at-a-time"
	followUpMode string
	name         string
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// retryWait is the retry backoff being waited out: set by auto_retry_start,
// cleared when the attempt starts or the chain ends.
type retryWait struct {
	attempt int32
	at      time.Time // zero: not waiting
}

func (s *Server) retryWaiting(attempt int32, at time.Time) {
	s.mu.Lock()
	s.retry = retryWait{attempt: attempt, at: at}
	s.mu.Unlock()
}

func (s *Server) retryWaitOver() {
	s.mu.Lock()
	s.retry = retryWait{}
	s.mu.Unlock()
}

// prompt starts a prompt, or queues it behind the running one when
// streamingBehavior says how ("steer" or "followUp").
func (s *Server) prompt(ctx context.Context, line []byte) (any, error) {
	var c struct {
		Message           string `json:"message"`
		StreamingBehavior string `json:"streamingBehavior"`
		Priority          string `json:"priority"`
	}
	if err := decode(line, &c, "message"); err != nil {
		return nil, err
	}
	if c.Priority != "" {
		p, err := pacing.ParsePriority(c.Priority)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		sess := s.session
		s.mu.Unlock()
		sess.SetPriority(p) // from this prompt on
	}
	switch c.StreamingBehavior {
	case "", "steer", "followUp":
	default:
		return nil, fmt.Errorf(`streamingBehavior %q: want "steer" or "followUp"`, c.StreamingBehavior)
	}
	if err := s.checkPrompt(c.Message); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.awaitEndingLocked()
	if s.prompting {
		defer s.mu.Unlock()
		switch c.StreamingBehavior {
		case "steer":
			s.enqueueLocked(&s.queue.steering, c.Message)
		case "followUp":
			s.enqueueLocked(&s.queue.followUp, c.Message)
		default:
			return nil, errors.New(`a prompt is already running; send it with streamingBehavior "steer" or "followUp" to queue it, or abort`)
		}
		return nil, nil
	}
	accepted := s.startPromptLocked(ctx, c.Message)
	s.mu.Unlock()
	return nil, <-accepted
}

// endingWait bounds how long a command waits for a prompt whose last run
// is out to end here.
const endingWait = 5 * time.Second

// awaitEndingLocked waits, s.mu held, while the running prompt's last
// agent_end is out but its end has not reached the server yet: a client
// that sends its next prompt on reading agent_end (pi's
// RpcClient.waitForIdle) finds the session idle, as it is.
func (s *Server) awaitEndingLocked() {
	if !s.prompting || !s.lastRunOut {
		return
	}
	wake := time.AfterFunc(endingWait, func() {
		s.mu.Lock()
		s.settledCond.Broadcast()
		s.mu.Unlock()
	})
	defer wake.Stop()
	for deadline := time.Now().Add(endingWait); s.prompting && s.lastRunOut && time.Now().Before(deadline); {
		s.settledCond.Wait()
	}
}

// lastRunEnded records that the running prompt's agent_end with willRetry
// false is out (or, with more to come, that a run started again).
func (s *Server) lastRunEnded(ended bool) {
	s.mu.Lock()
	s.lastRunOut = ended && s.prompting
	s.mu.Unlock()
}

// checkPrompt rejects a prompt over the runtime's prompt limit, checked
// after decoding: invalid UTF-8 replaced by U+FFFD can make the text
// longer than the line.
func (s *Server) checkPrompt(text string) error {
	if err := s.Runtime.CheckPrompt(text); err != nil {
		return fmt.Errorf("prompt of %d bytes rejected: %w", len(text), err)
	}
	return nil
}

func (s *Server) steer(ctx context.Context, line []byte) (any, error) {
	return nil, s.queueCommand(ctx, line, &s.queue.steering)
}

func (s *Server) followUp(ctx context.Context, line []byte) (any, error) {
	return nil, s.queueCommand(ctx, line, &s.queue.followUp)
}

// queueCommand queues a steer or follow_up message; with no prompt
// running, it starts one.
func (s *Server) queueCommand(ctx context.Context, line []byte, q *[]string) error {
	var c struct {
		Message string `json:"message"`
	}
	if err := decode(line, &c, "message"); err != nil {
		return err
	}
	if err := s.checkPrompt(c.Message); err != nil {
		return err
	}
	s.mu.Lock()
	s.awaitEndingLocked()
	if s.prompting {
		defer s.mu.Unlock()
		s.enqueueLocked(q, c.Message)
		return nil
	}
	accepted := s.startPromptLocked(ctx, c.Message)
	s.mu.Unlock()
	return <-accepted
}

// startPromptLocked runs text as a prompt in the background; when it has
// settled, the next queued message (if any) starts. s.mu is held. The
// returned channel says when the session has recorded the prompt in its
// history (nil), or why it could not take it, so that a success response
// means the prompt is kept.
func (s *Server) startPromptLocked(ctx context.Context, text string) <-chan error {
	s.prompting, s.lastRunOut = true, false
	s.started++
	s.prompts.Add(1)
	sess := s.session
	accepted := make(chan error, 1)
	sess.Submit(context.WithoutCancel(ctx), text, func(err error) { accepted <- err },
		func(_ *musepi.AssistantMessage, err error) {
			// Not under s.mu here: done may run before Submit returns.
			go s.promptEnded(ctx, sess, err)
		})
	return accepted
}

// promptEnded follows a prompt that settled: the client gets an
// agent_settled for a prompt the session never took (a runtime limit, a
// closed session), and the next queued message starts.
func (s *Server) promptEnded(ctx context.Context, sess *musepi.Session, err error) {
	defer s.prompts.Done()
	var settledBySession *musepi.PromptError
	switch {
	case err == nil:
	case errors.As(err, &settledBySession):
		s.Log.Debug("prompt ended", slog.Any("error", err), slog.String("session", sess.ID()))
	default:
		s.Log.Warn("prompt not started", slog.Any("error", err), slog.String("session", sess.ID()))
		// A translator of its own: this line is no part of the session's
		// event sequence (agent_settled passes through unchanged).
		s.writeEvent(&translator{s: s}, event{SessionID: sess.ID(), Type: "agent_settled",
			Payload: &messages.AgentSettled{Success: false, Error: err.Error()}})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prompting, s.lastRunOut = false, false
	s.settledCond.Broadcast()
	if ctx.Err() != nil || s.session != sess {
		return
	}
	if next, ok := s.dequeueLocked(); ok {
		s.startPromptLocked(ctx, next)
	}
}

func (s *Server) abort(context.Context, []byte) (any, error) {
	s.clearQueue()
	s.current().Abort()
	return nil, nil
}

func (s *Server) abortRetry(context.Context, []byte) (any, error) {
	s.current().AbortRetry()
	return nil, nil
}

func (s *Server) setAutoRetry(_ context.Context, line []byte) (any, error) {
	var c struct {
		Enabled bool `json:"enabled"`
	}
	if err := decode(line, &c, "enabled"); err != nil {
		return nil, err
	}
	s.current().SetAutoRetryEnabled(c.Enabled)
	return nil, nil
}

// getState is pi's RpcSessionState plus MusePi's retry state: while a
// retry waits out its backoff, isStreaming is false, isRetrying true, and
// retryAttempt / nextAttemptAt (Unix ms) say which attempt comes when.
func (s *Server) getState(ctx context.Context, _ []byte) (any, error) {
	sess := s.current()
	entries, err := wireEntries(sess.Messages(ctx))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	waiting := !s.retry.at.IsZero()
	state := map[string]any{
		"model":                 s.modelOf(sess.Model()).json(),
		"thinkingLevel":         orDefault(s.prefs.thinking, "off"),
		"isStreaming":           s.prompting && !waiting,
		"isCompacting":          sess.IsCompacting(),
		"steeringMode":          orDefault(s.prefs.steeringMode, "one-at-a-time"),
		"followUpMode":          orDefault(s.prefs.followUpMode, "one-at-a-time"),
		"sessionId":             sess.ID(),
		"autoCompactionEnabled": sess.AutoCompaction(),
		"messageCount":          len(entries),
		"pendingMessageCount":   s.queue.len(),
		"autoRetryEnabled":      sess.AutoRetryEnabled(),
		"isRetrying":            sess.IsRetrying(),
	}
	if f := s.sessionFile(sess.ID()); f != "" {
		state["sessionFile"] = f
	}
	if s.prefs.name != "" {
		state["sessionName"] = s.prefs.name
	}
	if waiting {
		state["retryAttempt"] = s.retry.attempt
		state["nextAttemptAt"] = s.retry.at.UnixMilli()
	}
	return state, nil
}

// sessionFile is the history file of session id, or "" when history is
// not kept in files.
func (s *Server) sessionFile(id string) string {
	if s.HistoryDir == "" {
		return ""
	}
	return filepath.Join(s.HistoryDir, id+".jsonl")
}

func (s *Server) getMessages(ctx context.Context, _ []byte) (any, error) {
	entries, err := wireEntries(s.current().Messages(ctx))
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, len(entries))
	for _, e := range entries {
		if m := s.entryJSON(e); m != nil {
			out = append(out, m)
		}
	}
	return map[string]any{"messages": out}, nil
}

func (s *Server) setModel(ctx context.Context, line []byte) (any, error) {
	var c struct {
		Provider string `json:"provider"`
		ModelID  string `json:"modelId"`
	}
	if err := decode(line, &c, "provider", "modelId"); err != nil {
		return nil, err
	}
	if err := s.current().SetModel(ctx, c.Provider+"/"+c.ModelID); err != nil {
		return nil, err
	}
	return s.model(c.Provider, c.ModelID).json(), nil
}

// cycleModel switches to the model after the current one in Models; null
// when there is no other model.
func (s *Server) cycleModel(ctx context.Context, _ []byte) (any, error) {
	if len(s.Models) < 2 {
		return nil, nil
	}
	sess := s.current()
	next := s.Models[0]
	for i, m := range s.Models {
		if m.Selector() == sess.Model() {
			next = s.Models[(i+1)%len(s.Models)]
		}
	}
	if err := sess.SetModel(ctx, next.Selector()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	level := orDefault(s.prefs.thinking, "off")
	s.mu.Unlock()
	return map[string]any{"model": next.json(), "thinkingLevel": level, "isScoped": false}, nil
}

func (s *Server) availableModels(context.Context, []byte) (any, error) {
	out := make([]any, len(s.Models))
	for i, m := range s.Models {
		out[i] = m.json()
	}
	return map[string]any{"models": out}, nil
}

// thinkingLevels are pi's thinking levels, in cycling order.
var thinkingLevels = []string{"off", "minimal", "low", "medium", "high", "xhigh"}

func (s *Server) setThinkingLevel(_ context.Context, line []byte) (any, error) {
	var c struct {
		Level string `json:"level"`
	}
	if err := decode(line, &c, "level"); err != nil {
		return nil, err
	}
	return nil, s.applyThinkingLevel(c.Level)
}

// cycleThinkingLevel moves to the next thinking level; null when the
// model does not reason.
func (s *Server) cycleThinkingLevel(context.Context, []byte) (any, error) {
	if !s.modelOf(s.current().Model()).Reasoning {
		return nil, nil
	}
	s.mu.Lock()
	cur := orDefault(s.prefs.thinking, "off")
	s.mu.Unlock()
	next := thinkingLevels[0]
	for i, l := range thinkingLevels {
		if l == cur {
			next = thinkingLevels[(i+1)%len(thinkingLevels)]
		}
	}
	if err := s.applyThinkingLevel(next); err != nil {
		return nil, err
	}
	return map[string]any{"level": next}, nil
}

// applyThinkingLevel sets the session's thinking level, which the
// providers turn into their reasoning setting, and tells the client.
func (s *Server) applyThinkingLevel(level string) error {
	effort, err := provider.ParseThinkingLevel(level)
	if err != nil {
		return err
	}
	sess := s.current()
	sess.SetThinkingLevel(effort)
	s.mu.Lock()
	s.prefs.thinking = level
	s.mu.Unlock()
	s.writeLine(map[string]any{"type": "thinking_level_changed", "level": level, "sessionId": sess.ID()})
	return nil
}

func (s *Server) setSteeringMode(_ context.Context, line []byte) (any, error) {
	return nil, s.setMode(line, &s.prefs.steeringMode)
}

func (s *Server) setFollowUpMode(_ context.Context, line []byte) (any, error) {
	return nil, s.setMode(line, &s.prefs.followUpMode)
}

func (s *Server) setMode(line []byte, mode *string) error {
	var c struct {
		Mode string `json:"mode"`
	}
	if err := decode(line, &c, "mode"); err != nil {
		return err
	}
	if c.Mode != "all" && c.Mode != "one-at-a-time" {
		return fmt.Errorf(`mode %q: want "all" or "one-at-a-time"`, c.Mode)
	}
	s.mu.Lock()
	*mode = c.Mode
	s.mu.Unlock()
	return nil
}

// sessionStats is pi's SessionStats over the persisted history (failed
// turns included), plus MusePi's retries: those the session made, a retry
// counting once its call went out (a pending or cancelled one does not).
func (s *Server) sessionStats(ctx context.Context, _ []byte) (any, error) {
	sess := s.current()
	entries, err := wireEntries(sess.History(ctx))
	if err != nil {
		return nil, err
	}
	var h historyStats
	for _, e := range entries {
		h.count(e, s.model)
	}
	s.mu.Lock()
	retries := s.tally.Made()
	s.mu.Unlock()
	stats := map[string]any{
		"sessionId":         sess.ID(),
		"userMessages":      h.users,
		"assistantMessages": h.assistants,
		"toolCalls":         h.calls,
		"toolResults":       h.results,
		"totalMessages":     h.total,
		"tokens": map[string]int64{"input": h.in, "output": h.out, "cacheRead": h.cacheRead, "cacheWrite": h.cacheWrite,
			"total": h.in + h.out + h.cacheRead + h.cacheWrite},
		"cost":    h.cost,
		"retries": retries,
	}
	if f := s.sessionFile(sess.ID()); f != "" {
		stats["sessionFile"] = f
	}
	return stats, nil
}

// historyStats are SessionStats' counts of a history's messages, and the
// tokens and cost of its assistant messages.
type historyStats struct {
	users, assistants, calls, results, total int
	in, out, cacheRead, cacheWrite           int64
	cost                                     float64
}

// count adds e, a user, assistant or tool result message; other entries
// are not messages and are not counted. model finds an assistant
// message's model, for its cost.
func (h *historyStats) count(e *messages.Entry, model func(provider, id string) Model) {
	switch {
	case e.GetUser() != nil:
		h.users++
	case e.GetAssistant() != nil:
		a := e.GetAssistant()
		h.assistants++
		h.calls += len(toolCallsOf(a))
		u := a.GetUsage()
		h.in, h.out = h.in+u.GetInput(), h.out+u.GetOutput()
		h.cacheRead, h.cacheWrite = h.cacheRead+u.GetCacheRead(), h.cacheWrite+u.GetCacheWrite()
		h.cost += usageJSON(u, model(a.GetProvider(), a.GetModel()).Cost)["cost"].(map[string]float64)["total"]
	case e.GetToolResult() != nil:
		h.results++
	default:
		return
	}
	h.total++
}

// wireEntries are entries in the wire format, whose JSON the RPC writes.
func wireEntries(entries []musepi.Entry, err error) ([]*messages.Entry, error) {
	if err != nil {
		return nil, err
	}
	out := make([]*messages.Entry, len(entries))
	for i, e := range entries {
		out[i] = e.Wire()
	}
	return out, nil
}

func toolCallsOf(m *messages.AssistantMessage) []*messages.ToolCall {
	var out []*messages.ToolCall
	for _, b := range m.GetContent() {
		if c := b.GetToolCall(); c != nil {
			out = append(out, c)
		}
	}
	return out
}

// lastAssistantText is the text of the last assistant message of the
// context; null when there is none.
func (s *Server) lastAssistantText(ctx context.Context, _ []byte) (any, error) {
	entries, err := wireEntries(s.current().Messages(ctx))
	if err != nil {
		return nil, err
	}
	for i := len(entries) - 1; i >= 0; i-- {
		a := entries[i].GetAssistant()
		if a == nil {
			continue
		}
		var b strings.Builder
		for _, c := range a.GetContent() {
			b.WriteString(c.GetText().GetText())
		}
		return map[string]any{"text": b.String()}, nil
	}
	return map[string]any{"text": nil}, nil
}

func (s *Server) setSessionName(_ context.Context, line []byte) (any, error) {
	var c struct {
		Name string `json:"name"`
	}
	if err := decode(line, &c, "name"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.prefs.name = c.Name
	id := s.session.ID()
	s.mu.Unlock()
	s.writeLine(map[string]any{"type": "session_info_changed", "name": c.Name, "sessionId": id})
	return nil, nil
}

// compact runs the runtime's compaction hook on the context; the
// result is pi's CompactionResult, its summary saying what the hook kept.
// customInstructions are not passed on: the hook takes none.
func (s *Server) compact(ctx context.Context, _ []byte) (any, error) {
	res, err := s.current().Compact(ctx)
	if err != nil {
		return nil, err
	}
	first := ""
	if res.FirstKeptSeq > 0 {
		first = fmt.Sprint(res.FirstKeptSeq)
	}
	return map[string]any{
		"summary":          fmt.Sprintf("the compaction hook kept %d of %d entries", res.EntriesAfter, res.EntriesBefore),
		"firstKeptEntryId": first,
		"tokensBefore":     res.TokensBefore,
	}, nil
}

// setAutoCompaction switches running the compaction hook on overflow.
func (s *Server) setAutoCompaction(_ context.Context, line []byte) (any, error) {
	var c struct {
		Enabled bool `json:"enabled"`
	}
	if err := decode(line, &c, "enabled"); err != nil {
		return nil, err
	}
	s.current().SetAutoCompaction(c.Enabled)
	return nil, nil
}

// commands lists the slash commands: MusePi has none.
func (s *Server) commands(context.Context, []byte) (any, error) {
	return map[string]any{"commands": []any{}}, nil
}

// newSession ends the current session (aborting a running prompt and
// dropping the queue) and starts a fresh one.
func (s *Server) newSession(ctx context.Context, _ []byte) (any, error) {
	if err := s.replaceSession(ctx, s.SessionOptions...); err != nil {
		return nil, err
	}
	return map[string]any{"cancelled": false, "sessionId": s.current().ID()}, nil
}

// switchSession resumes another session of the history store, named by its
// file (as get_state's sessionFile reports it) or its id.
func (s *Server) switchSession(ctx context.Context, line []byte) (any, error) {
	var c struct {
		SessionPath string `json:"sessionPath"`
	}
	if err := decode(line, &c, "sessionPath"); err != nil {
		return nil, err
	}
	id := strings.TrimSuffix(filepath.Base(c.SessionPath), ".jsonl")
	if !history.ValidSessionID(id) {
		return nil, fmt.Errorf("sessionPath %q: not a session file or id", c.SessionPath)
	}
	opts := append(append([]musepi.SessionOption(nil), s.SessionOptions...), musepi.WithSessionID(id))
	if err := s.replaceSession(ctx, opts...); err != nil {
		return nil, err
	}
	return map[string]any{"cancelled": false, "sessionId": id}, nil
}

// replaceSession closes the current session, after aborting its prompt,
// and starts one with opts; the thinking level carries over.
func (s *Server) replaceSession(ctx context.Context, opts ...musepi.SessionOption) error {
	s.clearQueue()
	old := s.current()
	old.Abort()
	s.prompts.Wait()
	s.waitSettledWritten(5 * time.Second)
	if err := s.closeSession(ctx); err != nil {
		s.Log.Warn("replace session", slog.Any("error", err))
	}
	if err := s.startSession(ctx, opts...); err != nil {
		return err
	}
	s.mu.Lock()
	level := s.prefs.thinking
	s.mu.Unlock()
	if level != "" {
		effort, _ := provider.ParseThinkingLevel(level)
		s.current().SetThinkingLevel(effort)
	}
	return nil
}
