package main

import "time"

// Figure names one measured quantity of a storm run: its key in the JSON
// file and its row in the Markdown table.
type Figure struct {
	Key   string // JSON key, snake_case
	Label string // table row label
	Unit  string // shown after the label, e.g. "µs", "KB"; empty for counts
}

// The figures a system may report, in table order. A system reports only
// the ones it measures (the floor, say, has no prompts).
var figures = []Figure{
	{"prompts_started", "prompts started", ""},
	{"prompts_completed", "prompts completed", ""},
	{"prompts_failed", "prompts failed", ""},
	{"prompts_lost", "prompts lost", ""},
	{"requests_total", "provider requests, total", ""},
	{"requests_outage", "provider requests during the outage", ""},
	{"retries_outage", "retry requests during the outage", ""},
	{"retry_attempts", "retry attempts", ""},
	{"cpu_seconds", "CPU time", "s"},
	{"sample_gc_cpu_seconds", "CPU left out: the memory sample's two collections", "s"},
	{"attempts_per_cpu_second", "retry attempts per CPU-second", ""},
	{"cpu_us_per_attempt", "CPU per attempt", "µs"},
	{"messages_per_attempt", "actor messages per retry attempt (counted)", ""},
	{"wall_seconds", "wall time", "s"},
	{"attempts_per_second", "retry attempts per wall-second", ""},
	{"lateness_p50_ms", "backoff wake-up lateness p50", "ms"},
	{"lateness_p99_ms", "backoff wake-up lateness p99", "ms"},
	{"lateness_max_ms", "backoff wake-up lateness max", "ms"},
	{"first_wave_lateness_p99_ms", "first-wave lateness p99", "ms"},
	{"peak_heap_mb", "peak heap", "MB"},
	{"peak_memory_mb", "peak heap + goroutine stacks", "MB"},
	{"bytes_per_waiting_session", "memory per session waiting in backoff", "B"},
	{"goroutines_peak", "goroutines at peak", ""},
	{"goroutines_after", "goroutines after", ""},
	{"setup_seconds", "setup before the first prompt (sessions created)", "s"},
	{"lockstep_index", "lockstep index (1.0 = spread)", ""},
	{"drain_seconds", "time to drain after recovery", "s"},
	{"budget_extended_retries", "retries delayed by the budget", ""},
	{"cluster_nodes", "cluster nodes", ""},
	{"leave_seconds", "last node's leave (Shutdown, handing its sessions over)", "s"},
	{"sessions_moved", "sessions moved by the leave", ""},
	{"moved_next_request_p50_ms", "moved sessions: next request after the leave began, p50", "ms"},
	{"moved_next_request_p99_ms", "moved sessions: next request after the leave began, p99", "ms"},
	{"moved_next_request_max_ms", "moved sessions: next request after the leave began, max", "ms"},
	{"stayed_next_request_p50_ms", "other sessions: next request after the leave began, p50", "ms"},
	{"stayed_next_request_p99_ms", "other sessions: next request after the leave began, p99", "ms"},
}

// System is what one contender measured in a run: "floor", "peer" or
// "musepi" (and "musepi-budget-off" when budgets are compared).
type System struct {
	Name        string             `json:"name"`
	Description string             `json:"description"`
	Figures     map[string]float64 `json:"figures"` // by Figure.Key
	Timeline    *Timeline          `json:"timeline,omitempty"`
	Limits      *LimitTimeline     `json:"limit_timeline,omitempty"` // the overload limiter's limit per node
	Notes       []string           `json:"notes,omitempty"`          // e.g. why prompts failed
}

// Timeline counts provider requests and prompt completions per bucket,
// from the start of the run, and in the ratelimit scenario the requests
// refused with a 429.
type Timeline struct {
	BucketMs    int   `json:"bucket_ms"`
	Requests    []int `json:"requests"`
	Completions []int `json:"completions"`
	Refused     []int `json:"refused,omitempty"`
}

// Ratio compares MusePi with the floor or the peer on one figure.
type Ratio struct {
	Label string  `json:"label"` // "CPU per attempt, MusePi / floor"
	Value float64 `json:"value"`
}

// Report is everything a storm run writes: the table, the JSON file and
// the plot are renderings of it.
type Report struct {
	Command       string         `json:"command"`
	Mode          string         `json:"mode"` // "virtual" or "real"
	Sessions      int            `json:"sessions"`
	GoVersion     string         `json:"go_version"`
	CPUs          int            `json:"cpus"`
	Started       time.Time      `json:"started"`
	OutageStartMs int64          `json:"outage_start_ms"` // from the start of the run
	OutageEndMs   int64          `json:"outage_end_ms"`
	Scenario      string         `json:"scenario"` // one-line description
	Systems       []System       `json:"systems"`
	Ratios        []Ratio        `json:"ratios"`
	Targets       []TargetResult `json:"targets"` // the mode's targets, checked (none in cluster mode)
	Notes         []string       `json:"notes,omitempty"`
	Elapsed       time.Duration  `json:"elapsed_ns"`
}

// Combined is what -mode both writes: its runs, the virtual run's report
// then the real run's (each as its mode alone writes it), and the targets
// of both.
type Combined struct {
	Command string         `json:"command"`
	Mode    string         `json:"mode"` // "both"
	Started time.Time      `json:"started"`
	Runs    []*Report      `json:"runs"`
	Targets []TargetResult `json:"targets"` // the runs' targets, in order
	Elapsed time.Duration  `json:"elapsed_ns"`
}
