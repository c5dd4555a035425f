package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// writeMarkdown renders r as a Markdown document: a header block, one
// table with a row per figure and a column per system, then the ratios,
// the targets and the notes when there are any.
func writeMarkdown(w io.Writer, r *Report) error {
	var b bytes.Buffer
	b.WriteString("# Retry storm benchmark\n\n")
	fmt.Fprintf(&b, "- Command: %s\n", codeSpan(r.Command))
	writeRunMarkdown(&b, r, "##")
	writeTargets(&b, r.Targets, "##")
	writeNotes(&b, r, "##")
	_, err := w.Write(b.Bytes())
	return err
}

// writeCombinedMarkdown renders c as a Markdown document: a header block,
// each run's section (its header block, table, ratios and notes) one after
// the other, then the targets of both.
func writeCombinedMarkdown(w io.Writer, c *Combined) error {
	var b bytes.Buffer
	b.WriteString("# Retry storm benchmark\n\n")
	fmt.Fprintf(&b, "- Command: %s\n", codeSpan(c.Command))
	modes := make([]string, len(c.Runs))
	for i, r := range c.Runs {
		modes[i] = r.Mode
	}
	fmt.Fprintf(&b, "- Modes: %s, one run after the other\n", strings.Join(modes, ", "))
	fmt.Fprintf(&b, "- Elapsed: %s s\n", formatNumber(c.Elapsed.Seconds()))
	for _, r := range c.Runs {
		fmt.Fprintf(&b, "\n## %s mode\n\n", r.Mode)
		writeRunMarkdown(&b, r, "###")
		writeNotes(&b, r, "###")
	}
	writeTargets(&b, c.Targets, "##")
	_, err := w.Write(b.Bytes())
	return err
}

// writeRunMarkdown writes r's header lines but the command, its figure
// table and its ratios, under headings of level heading ("##").
func writeRunMarkdown(b *bytes.Buffer, r *Report, heading string) {
	fmt.Fprintf(b, "- Mode: %s\n", r.Mode)
	fmt.Fprintf(b, "- Sessions: %s\n", formatNumber(float64(r.Sessions)))
	fmt.Fprintf(b, "- Go: %s, CPUs: %d\n", r.GoVersion, r.CPUs)
	fmt.Fprintf(b, "- Scenario: %s\n", r.Scenario)
	fmt.Fprintf(b, "- Outage: %s s – %s s\n",
		formatNumber(float64(r.OutageStartMs)/1000), formatNumber(float64(r.OutageEndMs)/1000))
	fmt.Fprintf(b, "- Elapsed: %s s\n\n", formatNumber(r.Elapsed.Seconds()))
	writeFigureTable(b, r.Systems, figures)
	if len(r.Ratios) > 0 {
		fmt.Fprintf(b, "\n%s Ratios\n\n| Ratio | Value |\n|---|--:|\n", heading)
		for _, q := range r.Ratios {
			fmt.Fprintf(b, "| %s | %s× |\n", mdCell(q.Label), formatRatio(q.Value))
		}
	}
}

// writeFigureTable writes the table of systems' figures: a row per figure
// of rows that some system has, in that order, a column per system.
func writeFigureTable(b *bytes.Buffer, systems []System, rows []Figure) {
	b.WriteString("| Figure |")
	for _, s := range systems {
		fmt.Fprintf(b, " %s |", mdCell(s.Name))
	}
	b.WriteString("\n|---|")
	for range systems {
		b.WriteString("--:|")
	}
	b.WriteString("\n")
	for _, f := range rows {
		cells, present := make([]string, len(systems)), false
		for i, s := range systems {
			v, ok := s.Figures[f.Key]
			if !ok {
				cells[i] = "—"
				continue
			}
			cells[i], present = formatNumber(v), true
		}
		if !present {
			continue
		}
		label := f.Label
		if f.Unit != "" {
			label += " (" + f.Unit + ")"
		}
		fmt.Fprintf(b, "| %s | %s |\n", mdCell(label), strings.Join(cells, " | "))
	}
}

// writeTargets writes the targets table under a heading of level heading,
// a row per target: its name and mode, the measured value, the bound and
// whether it is met (and why not, when a figure is missing); nothing when
// there are no targets.
func writeTargets(b *bytes.Buffer, targets []TargetResult, heading string) {
	if len(targets) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s Targets\n\n| Target | Measured | Bound | Met |\n|---|--:|--:|---|\n", heading)
	for _, t := range targets {
		measured, met := "—", "no"
		if t.Measured != nil {
			measured = formatRatio(*t.Measured)
		}
		if t.Met {
			met = "yes"
		}
		if t.Missing != "" {
			met += " (" + t.Missing + ")"
		}
		fmt.Fprintf(b, "| %s (%s) | %s | %s %s | %s |\n",
			mdCell(t.Name), t.Mode, measured, comparisonSign(t.Comparison), formatRatio(t.Bound), mdCell(met))
	}
}

// comparisonSign is the sign c is written with in a table: ≤, ≥, or c
// itself.
func comparisonSign(c comparison) string {
	switch c {
	case atMost:
		return "≤"
	case atLeast:
		return "≥"
	}
	return string(c)
}

// writeNotes writes the notes of r and of its systems under a heading of
// level heading; nothing when there are none.
func writeNotes(b *bytes.Buffer, r *Report, heading string) {
	notes := slices.Clone(r.Notes)
	for _, s := range r.Systems {
		notes = append(notes, s.Notes...)
	}
	if len(notes) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s Notes\n\n", heading)
	for _, n := range notes {
		fmt.Fprintf(b, "- %s\n", n)
	}
}

// writeJSON writes v (a *Report or a *Combined) as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// SVG layout, in pixels.
const (
	svgWidth   = 900
	svgHeaderH = 50  // title and legend above the panels
	svgPanelH  = 230 // one system's panel, title and x labels included
	svgLeft    = 60  // room for the y tick labels
	svgRight   = 20
)

// Plot colours.
const (
	colourRequests    = "#d62728"
	colourCompletions = "#1f77b4"
	colourOutage      = "#ffe3c2"
	colourRefused     = "#ff7f0e"
)

// writeSVG plots the timelines of r as a self-contained SVG: one panel per
// system with a timeline, all on the same x scale (seconds from the start
// of the run) and y scale (count per bucket), with the outage shaded (and,
// in the ratelimit scenario, the 429 responses instead).
// It is written by hand on purpose: two or three polylines and a shaded
// band per panel fit in these few functions, which TestWriteSVG parses and
// checks; gonum.org/v1/plot would add gonum, its font and image modules
// for the same picture.
func writeSVG(w io.Writer, r *Report) error {
	panels, g := svgLayout(r)
	height := svgHeaderH + max(1, len(panels))*svgPanelH
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgWidth, height)
	title := "Retry storm: provider requests and completions per bucket"
	legend := []struct{ colour, label string }{
		{colourRequests, "provider requests"},
		{colourCompletions, "completions"},
		{colourOutage, "outage"},
	}
	if g.refused {
		title = "Rate-limit storm: provider requests, 429 responses and completions per bucket"
		legend[2] = struct{ colour, label string }{colourRefused, "429 responses"}
	}
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", svgLeft, title)
	for i, l := range legend {
		x := svgLeft + i*160
		fmt.Fprintf(&b, `<rect x="%d" y="30" width="14" height="10" fill="%s"/><text x="%d" y="40">%s</text>`+"\n",
			x, l.colour, x+20, l.label)
	}
	if len(panels) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d">no timelines recorded</text>`+"\n", svgLeft, svgHeaderH+svgPanelH/2)
	}
	for i, s := range panels {
		writeSVGPanel(&b, r, s, float64(svgHeaderH+i*svgPanelH), g)
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// svgScales are the plot's scales, shared by its panels.
type svgScales struct {
	xMaxMs      float64 // the x axis' end, ms from the start
	yTop, yStep float64 // the y axis' top and its tick step
	xStep       float64 // the x ticks' step, in seconds
	refused     bool    // some panel has 429 responses
}

// svgLayout picks the systems with a timeline and the scales that fit
// them all.
func svgLayout(r *Report) ([]System, svgScales) {
	var panels []System
	g := svgScales{xMaxMs: float64(r.OutageEndMs)}
	yMax := 0
	for _, s := range r.Systems {
		t := s.Timeline
		if t == nil {
			continue
		}
		panels = append(panels, s)
		n := max(len(t.Requests), len(t.Completions), len(t.Refused))
		g.xMaxMs = max(g.xMaxMs, float64(n*t.BucketMs))
		for _, series := range [][]int{t.Requests, t.Completions, t.Refused} {
			for _, c := range series {
				yMax = max(yMax, c)
			}
		}
		g.refused = g.refused || len(t.Refused) > 0
	}
	if g.xMaxMs <= 0 {
		g.xMaxMs = 1000
	}
	g.yStep = max(1, niceStep(float64(yMax), 4))
	g.yTop = max(g.yStep, math.Ceil(float64(yMax)/g.yStep)*g.yStep)
	g.xStep = niceStep(g.xMaxMs/1000, 8)
	return panels, g
}

// writeSVGPanel draws system s's panel, its top at top.
func writeSVGPanel(b *bytes.Buffer, r *Report, s System, top float64, g svgScales) {
	x0, x1 := float64(svgLeft), float64(svgWidth-svgRight)
	xAt := func(ms float64) float64 { return x0 + ms/g.xMaxMs*(x1-x0) }
	y0, y1 := top+28, top+svgPanelH-34
	yAt := func(c float64) float64 { return y1 - c/g.yTop*(y1-y0) }
	t := s.Timeline

	fmt.Fprintf(b, `<g class="panel">`+"\n")
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="13" font-weight="bold">%s</text>`+"\n", x0, top+18, html.EscapeString(s.Name))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#666">count per %d ms</text>`+"\n", x1, top+18, t.BucketMs)
	from := xAt(math.Max(0, float64(r.OutageStartMs)))
	to := xAt(math.Min(g.xMaxMs, float64(r.OutageEndMs)))
	if to > from {
		fmt.Fprintf(b, `<rect class="outage" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n",
			from, y0, to-from, y1-y0, colourOutage)
	}
	for k := 0; float64(k)*g.yStep <= g.yTop; k++ {
		c := float64(k) * g.yStep
		y := yAt(c)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x1, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, y+4, formatNumber(c))
	}
	for k := 0; float64(k)*g.xStep <= g.xMaxMs/1000*(1+1e-9); k++ {
		sec := float64(k) * g.xStep
		x := xAt(sec * 1000)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", x, y1, x, y1+4)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, y1+17, formatNumber(sec))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#666">seconds from start</text>`+"\n", x1, y1+31)
	fmt.Fprintf(b, `<polyline fill="none" stroke="#333" points="%.1f,%.1f %.1f,%.1f %.1f,%.1f"/>`+"\n", x0, y0, x0, y1, x1, y1)
	for _, series := range []struct {
		colour string
		counts []int
	}{{colourRequests, t.Requests}, {colourRefused, t.Refused}, {colourCompletions, t.Completions}} {
		if len(series.counts) == 0 {
			continue
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke-width="1.5" stroke="%s" points="`, series.colour)
		for k, c := range series.counts {
			if k > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(b, "%.1f,%.1f", xAt((float64(k)+0.5)*float64(t.BucketMs)), yAt(float64(c)))
		}
		b.WriteString(`"/>` + "\n")
	}
	b.WriteString("</g>\n")
}

// outputFile is one file of a run's outputs: its name and what renders
// it.
type outputFile struct {
	name   string
	render func(io.Writer) error
}

// reportFiles are the outputs of a run of one mode: storm.md, storm.json
// and storm.svg.
func reportFiles(r *Report) []outputFile {
	return []outputFile{
		{"storm.md", func(w io.Writer) error { return writeMarkdown(w, r) }},
		{"storm.json", func(w io.Writer) error { return writeJSON(w, r) }},
		{"storm.svg", func(w io.Writer) error { return writeSVG(w, r) }},
	}
}

// combinedFiles are the outputs of -mode both: storm.md and storm.json
// for both runs, and each run's plot, storm-<mode>.svg (their time scales
// differ).
func combinedFiles(c *Combined) []outputFile {
	files := []outputFile{
		{"storm.md", func(w io.Writer) error { return writeCombinedMarkdown(w, c) }},
		{"storm.json", func(w io.Writer) error { return writeJSON(w, c) }},
	}
	for _, r := range c.Runs {
		files = append(files, outputFile{"storm-" + r.Mode + ".svg", func(w io.Writer) error { return writeSVG(w, r) }})
	}
	return files
}

// writeFiles creates dir and writes files into it.
func writeFiles(dir string, files []outputFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output folder: %w", err)
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(dir, f.name), f.render); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return nil
}

// writeFile creates path and renders into it with render.
func writeFile(path string, render func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := render(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// niceStep returns a tick step of 1, 2 or 5 times a power of ten that
// divides span into at most about n intervals; 1 when span is not positive.
func niceStep(span float64, n int) float64 {
	raw := span / float64(n)
	if raw <= 0 || math.IsInf(raw, 0) || math.IsNaN(raw) {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// formatNumber formats v for a table: integers with thousands separators
// (100,000), other values with three significant digits (0.482, 12.3),
// rounded to an integer from 1,000 up (1,234).
func formatNumber(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		return groupThousands(int64(v))
	}
	s := strconv.FormatFloat(v, 'g', 3, 64)
	if strings.Contains(s, "e+") {
		return groupThousands(int64(math.Round(v)))
	}
	return s
}

// formatRatio formats a ratio with two decimals between 0.1 and 10, where
// ratios usually fall, and like formatNumber elsewhere.
func formatRatio(v float64) string {
	if a := math.Abs(v); a >= 0.1 && a < 10 {
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return formatNumber(v)
}

// groupThousands formats n with a comma between groups of three digits.
func groupThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	sign := ""
	if n < 0 {
		sign, s = "-", s[1:]
	}
	var b strings.Builder
	b.WriteString(sign)
	for i, d := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return b.String()
}

// mdCell escapes the pipes in s so that it stays in one table cell.
func mdCell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// codeSpan wraps s in a Markdown code span, with enough backticks that
// backticks inside s do not end it.
func codeSpan(s string) string {
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return fence + s + fence
}
