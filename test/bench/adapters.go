package bench

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// adapterPlacement reads kvxds's own /metrics at admin after a
// KVXDSAdapters run and says how it placed the adapters: how many, on how
// many replica places against the fleet's slots (replicas × maxLoRA), how
// many in the tail (kvxds_adapter_over_capacity), and the moves by cause.
func adapterPlacement(ctx context.Context, hc *http.Client, admin string, replicas, maxLoRA int) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("kvxds metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("kvxds metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return "", fmt.Errorf("kvxds metrics: %w", err)
	}
	value := func(m *dto.Metric) float64 {
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		}
		return m.GetUntyped().GetValue()
	}
	sum := func(name string) (n int, total float64) {
		for _, m := range fams[name].GetMetric() {
			n++
			total += value(m)
		}
		return n, total
	}
	placed, places := sum("kvxds_adapter_members")
	_, over := sum("kvxds_adapter_over_capacity")
	var moves []string
	for _, m := range fams["kvxds_adapter_moves_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "cause" {
				moves = append(moves, fmt.Sprintf("%s %.0f", l.GetValue(), value(m)))
			}
		}
	}
	if len(moves) == 0 {
		moves = []string{"none"}
	}
	return fmt.Sprintf("at the end, kvxds placed %d adapters on %.0f replica places (the fleet has %d × %d = %d slots), "+
		"%.0f of them in the tail; adapters moved: %s", placed, places, replicas, maxLoRA, replicas*maxLoRA, over,
		strings.Join(moves, ", ")), nil
}
