package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sampleReport returns a report with three systems, two of them with
// timelines, and some figures missing.
func sampleReport() *Report {
	return &Report{
		Command:       "go run ./bench/storm -sessions 100000",
		Mode:          "virtual",
		Sessions:      100000,
		GoVersion:     "go1.26.0",
		CPUs:          8,
		Started:       time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		OutageStartMs: 5000,
		OutageEndMs:   35000,
		Scenario:      "provider returns 529 for 30 s",
		Systems: []System{
			{Name: "floor", Figures: map[string]float64{"requests_total": 100000, "cpu_us_per_attempt": 0.482}},
			{Name: "peer", Figures: map[string]float64{"requests_total": 2500000, "cpu_us_per_attempt": 12.34},
				Timeline: &Timeline{BucketMs: 1000, Requests: []int{10, 5000, 200, 3}, Completions: []int{0, 0, 100, 900}}},
			{Name: "musepi", Figures: map[string]float64{"requests_total": 123456, "cpu_us_per_attempt": 1234.4, "lockstep_index": 1.04},
				Timeline: &Timeline{BucketMs: 1000, Requests: []int{10, 20, 30, 40, 50, 60}, Completions: []int{1, 2, 3, 4, 5, 6}}},
		},
		Ratios: []Ratio{{Label: "CPU per attempt, MusePi / floor", Value: 0.4213}},
		Targets: []TargetResult{
			{Mode: "virtual", Name: "CPU per attempt, musepi / floor", System: "musepi", Measured: ptr(2561), Comparison: atMost, Bound: 1.5},
			{Mode: "virtual", Name: "retry attempts per wall-second, musepi / floor", System: "musepi", Measured: ptr(0.7), Comparison: atLeast, Bound: 0.67, Met: true},
			{Mode: "virtual", Name: "lockstep index, musepi", System: "musepi", Comparison: atMost, Bound: 1.5, Missing: "musepi has no lockstep_index"},
		},
		Notes:   []string{"virtual clock"},
		Elapsed: 83400 * time.Millisecond,
	}
}

// sampleCombined returns what -mode both writes, its runs two sample
// reports, the second in real mode without targets.
func sampleCombined() *Combined {
	virtual, wall := sampleReport(), sampleReport()
	wall.Mode, wall.Targets = "real", []TargetResult{}
	return &Combined{
		Command: "go run ./bench/storm -mode both", Mode: "both", Started: virtual.Started,
		Runs: []*Report{virtual, wall}, Targets: virtual.Targets, Elapsed: 200 * time.Second,
	}
}

func TestFormatNumber(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0"},
		{7, "7"},
		{100000, "100,000"},
		{-1234567, "-1,234,567"},
		{0.48213, "0.482"},
		{12.34, "12.3"},
		{123.4, "123"},
		{1234.4, "1,234"},
		{999.7, "1,000"},
		{0.00012345, "0.000123"},
	} {
		if got := formatNumber(tc.in); got != tc.want {
			t.Errorf("formatNumber(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestWriteMarkdown(t *testing.T) {
	r := sampleReport()
	var b bytes.Buffer
	if err := writeMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, tc := range []struct {
		name string
		want string
		in   bool
	}{
		{"heading", "# ", true},
		{"command", "`go run ./bench/storm -sessions 100000`", true},
		{"table header", "| Figure | floor | peer | musepi |", true},
		{"unit in label", "| CPU per attempt (µs) | 0.482 | 12.3 | 1,234 |", true},
		{"thousands", "| provider requests, total | 100,000 | 2,500,000 | 123,456 |", true},
		{"missing cell", "| lockstep index (1.0 = spread) | — | — | 1.04 |", true},
		{"ratio", "| CPU per attempt, MusePi / floor | 0.42× |", true},
		{"targets header", "| Target | Measured | Bound | Met |", true},
		{"target not met", "| CPU per attempt, musepi / floor (virtual) | 2,561 | ≤ 1.50 | no |", true},
		{"target met", "| retry attempts per wall-second, musepi / floor (virtual) | 0.70 | ≥ 0.67 | yes |", true},
		{"target missing", "| lockstep index, musepi (virtual) | — | ≤ 1.50 | no (musepi has no lockstep_index) |", true},
		{"note", "- virtual clock", true},
		{"row nobody has", "peak heap", false},
	} {
		if strings.Contains(md, tc.want) != tc.in {
			t.Errorf("%s: contains %q = %v, want %v\n%s", tc.name, tc.want, !tc.in, tc.in, md)
		}
	}
	checkOrder(t, md, "| Figure |", "## Ratios", "## Targets", "## Notes")
}

func TestWriteMarkdownNoTargets(t *testing.T) {
	r := sampleReport()
	r.Targets = []TargetResult{}
	var b bytes.Buffer
	if err := writeMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Targets") {
		t.Errorf("a run without targets has a Targets section:\n%s", b.String())
	}
}

func TestWriteCombinedMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := writeCombinedMarkdown(&b, sampleCombined()); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	checkOrder(t, md, "# Retry storm benchmark", "- Command: `go run ./bench/storm -mode both`", "- Modes: virtual, real",
		"## virtual mode", "- Mode: virtual", "| Figure | floor | peer | musepi |", "### Ratios", "### Notes",
		"## real mode", "- Mode: real", "| Figure | floor | peer | musepi |", "### Ratios", "### Notes",
		"## Targets", "| CPU per attempt, musepi / floor (virtual) | 2,561 | ≤ 1.50 | no |")
	if n := strings.Count(md, "Targets"); n != 1 {
		t.Errorf("%d Targets sections, want 1 (after both runs):\n%s", n, md)
	}
}

// checkOrder checks that md has each of parts, in order, each after the
// one before.
func checkOrder(t *testing.T, md string, parts ...string) {
	t.Helper()
	rest := md
	for _, p := range parts {
		i := strings.Index(rest, p)
		if i < 0 {
			t.Errorf("no %q after the parts before it, in:\n%s", p, md)
			return
		}
		rest = rest[i+len(p):]
	}
}

func TestWriteJSONRoundTrip(t *testing.T) {
	want := sampleReport()
	var b bytes.Buffer
	if err := writeJSON(&b, want); err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if !got.Started.Equal(want.Started) {
		t.Errorf("Started = %v, want %v", got.Started, want.Started)
	}
	got.Started = want.Started
	if !reflect.DeepEqual(&got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, *want)
	}
}

func TestCombinedFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	want := sampleCombined()
	if err := writeFiles(dir, combinedFiles(want)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"storm.md", "storm.json", "storm-virtual.svg", "storm-real.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v, %v", name, fi, err)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "storm.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got Combined
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	got.Started = want.Started
	for _, r := range got.Runs {
		r.Started = want.Started
	}
	if !reflect.DeepEqual(&got, want) {
		t.Errorf("storm.json:\n got %+v\nwant %+v", got, *want)
	}
	if !strings.Contains(string(data), `"measured": null`) {
		t.Errorf("storm.json: a missing measured value is not null:\n%s", data)
	}
}

func TestWriteSVG(t *testing.T) {
	for _, tc := range []struct {
		name    string
		report  func() *Report
		panels  int
		outages int
	}{
		{"sample", sampleReport, 2, 2},
		{"empty timelines", func() *Report {
			r := sampleReport()
			r.Systems[1].Timeline = &Timeline{}
			r.Systems[2].Timeline = &Timeline{BucketMs: 100, Requests: []int{0, 0}, Completions: []int{}}
			return r
		}, 2, 2},
		{"no systems", func() *Report { return &Report{} }, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeSVG(&b, tc.report()); err != nil {
				t.Fatal(err)
			}
			if s := b.String(); strings.Contains(s, "NaN") || strings.Contains(s, "Inf") {
				t.Errorf("SVG has a non-finite number:\n%s", s)
			}
			panels, outages := 0, 0
			dec := xml.NewDecoder(&b)
			for {
				tok, err := dec.Token()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("SVG does not parse: %v", err)
				}
				if el, ok := tok.(xml.StartElement); ok {
					switch class := attr(el, "class"); {
					case el.Name.Local == "g" && class == "panel":
						panels++
					case el.Name.Local == "rect" && class == "outage":
						outages++
					}
				}
			}
			if panels != tc.panels || outages != tc.outages {
				t.Errorf("panels, outage rects = %d, %d; want %d, %d", panels, outages, tc.panels, tc.outages)
			}
		})
	}
}

// attr returns the value of el's attribute name, or "".
func attr(el xml.StartElement, name string) string {
	for _, a := range el.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func TestReportFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	if err := writeFiles(dir, reportFiles(sampleReport())); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"storm.md", "storm.json", "storm.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v, %v", name, fi, err)
		}
	}
}
