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
		Ratios:  []Ratio{{Label: "CPU per attempt, MusePi / floor", Value: 0.4213}},
		Notes:   []string{"virtual clock"},
		Elapsed: 83400 * time.Millisecond,
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
		{"note", "- virtual clock", true},
		{"row nobody has", "peak heap", false},
	} {
		if strings.Contains(md, tc.want) != tc.in {
			t.Errorf("%s: contains %q = %v, want %v\n%s", tc.name, tc.want, !tc.in, tc.in, md)
		}
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

func TestWriteOutputs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	if err := writeOutputs(dir, sampleReport()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"storm.md", "storm.json", "storm.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v, %v", name, fi, err)
		}
	}
}
