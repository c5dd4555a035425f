package rpc

import "strings"

// queue holds messages sent while a prompt runs: steering messages and
// follow-ups. When the running prompt settles, the next prompt takes the
// steering messages first, then the follow-ups; in "all" mode every queued
// message of that kind goes in one prompt (separated by blank lines), in
// "one-at-a-time" mode one message per prompt.
type queue struct {
	steering, followUp []string
}

func (q *queue) len() int { return len(q.steering) + len(q.followUp) }

// enqueueLocked adds text to one of the queues and tells the client with
// queue_update. s.mu is held.
func (s *Server) enqueueLocked(q *[]string, text string) {
	*q = append(*q, text)
	s.writeQueueLocked()
}

// takeSteering hands the running prompt its steering messages at a turn
// boundary: all of them in "all" mode, else the first. It runs on the
// session's goroutine and only takes s.mu.
func (s *Server) takeSteering() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue.steering) == 0 {
		return nil
	}
	n := 1
	if s.prefs.steeringMode == "all" {
		n = len(s.queue.steering)
	}
	out := append([]string(nil), s.queue.steering[:n]...)
	s.queue.steering = append([]string(nil), s.queue.steering[n:]...)
	s.writeQueueLocked()
	return out
}

// dequeueLocked takes the next prompt from the queue. s.mu is held.
func (s *Server) dequeueLocked() (string, bool) {
	q, mode := &s.queue.steering, s.prefs.steeringMode
	if len(*q) == 0 {
		q, mode = &s.queue.followUp, s.prefs.followUpMode
	}
	if len(*q) == 0 {
		return "", false
	}
	n := 1
	if mode == "all" {
		n = len(*q)
	}
	text := strings.Join((*q)[:n], "\n\n")
	*q = append([]string(nil), (*q)[n:]...)
	s.writeQueueLocked()
	return text, true
}

// clearQueue drops every queued message (abort, new session).
func (s *Server) clearQueue() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queue.len() == 0 {
		return
	}
	s.queue = queue{}
	s.writeQueueLocked()
}

// writeQueueLocked writes pi's queue_update event. s.mu is held.
func (s *Server) writeQueueLocked() {
	line := map[string]any{
		"type":     "queue_update",
		"steering": append([]string{}, s.queue.steering...),
		"followUp": append([]string{}, s.queue.followUp...),
	}
	if s.session != nil {
		line["sessionId"] = s.session.ID()
	}
	s.writeLine(line)
}
