package telemetry

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The "Metrics" section of docs/observability.md lists every metric, with
// its labels, in a table row of its own.
func TestDocsListEveryMetric(t *testing.T) {
	const doc = "docs/observability.md"
	data, err := os.ReadFile("../../" + doc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Metrics\n")
	if !ok {
		t.Fatal(doc + ` has no "## Metrics" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			name, _, _ = strings.Cut(name, "`")
			rows[name] = line
		}
	}
	for _, m := range All {
		row, ok := rows[m.PrometheusName()]
		if !ok {
			t.Errorf("%s: no row for %s", doc, m.PrometheusName())
			continue
		}
		for _, l := range m.Labels {
			if !strings.Contains(row, "`"+l+"`") {
				t.Errorf("%s: the row of %s does not name its label %s", doc, m.PrometheusName(), l)
			}
		}
		delete(rows, m.PrometheusName())
	}
	for name := range rows {
		t.Errorf("%s: row for %s, which is no metric", doc, name)
	}
}

// The Grafana dashboard queries only metrics that exist, and each of them.
func TestDashboardUsesEveryMetric(t *testing.T) {
	data, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	known := map[string]bool{}
	for _, m := range All {
		known[m.PrometheusName()] = true
	}
	used := map[string]bool{}
	name := regexp.MustCompile(`(?:musepi|gen_ai_client)_[a-z_]+`)
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			for _, n := range name.FindAllString(target.Expr, -1) {
				if !known[n] {
					for _, suffix := range []string{"_bucket", "_count", "_sum"} {
						if base, ok := strings.CutSuffix(n, suffix); ok && known[base] {
							n = base
						}
					}
				}
				if !known[n] {
					t.Errorf("panel %q queries %s, which is no metric", p.Title, n)
				}
				used[n] = true
			}
		}
	}
	for _, m := range All {
		if !used[m.PrometheusName()] {
			t.Errorf("no panel shows %s", m.PrometheusName())
		}
	}
}
