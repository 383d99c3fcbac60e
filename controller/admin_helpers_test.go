package controller

import (
	"encoding/json"
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvxds/kvxds/status"
)

// statusOf is the status document a running kvxds's admin server serves
// at adminAddr, checked to be JSON.
func statusOf(t *testing.T, adminAddr string) status.Status {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + status.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s: %s, %s", status.Path, resp.Status, resp.Header.Get("Content-Type"))
	}
	var st status.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

func sample(mfs map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	mf, ok := mfs[name]
	if !ok {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		match := 0
		for _, lp := range m.GetLabel() {
			if v, ok := labels[lp.GetName()]; ok && v == lp.GetValue() {
				match++
			}
		}
		if match != len(labels) {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// metricWant is one sample a test expects in /metrics.
type metricWant struct {
	name   string
	labels map[string]string
	want   float64
}

// wantMetrics checks each of wants against the families scraped.
func wantMetrics(t *testing.T, mfs map[string]*dto.MetricFamily, wants []metricWant) {
	t.Helper()
	for _, w := range wants {
		if got, ok := sample(mfs, w.name, w.labels); !ok || got != w.want {
			t.Errorf("%s%v = %v (found %v), want %v", w.name, w.labels, got, ok, w.want)
		}
	}
}
