package weights

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// pageFormat is the exposition format of a metrics page.
type pageFormat int

const (
	pageText pageFormat = iota
	pageOpenMetrics
)

// openMetricsDecodeFormat selects expfmt's OpenMetrics 1.0 decoder.
// escaping=allow-utf-8 makes NewDecoder validate names as UTF-8 rather than
// with the legacy rules, matching the text path below.
var openMetricsDecodeFormat = expfmt.FmtOpenMetrics_1_0_0.WithEscapingScheme(model.NoEscaping)

// pageFormatOf maps an HTTP Content-Type value to a page format. Like
// expfmt.NewDecoder, anything that is not OpenMetrics is read as the text
// format, including text/plain version=1.0.0 (which prometheus_client ≥
// 0.21 announces for the same text format, and which expfmt.ResponseFormat
// calls unknown) and error pages (which then fail to parse, as they should).
func pageFormatOf(contentType string) (pageFormat, error) {
	if strings.TrimSpace(contentType) == "" {
		return pageText, nil
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return pageText, nil
	}
	switch mt {
	case expfmt.OpenMetricsType:
		switch v := params["version"]; v {
		case "", expfmt.OpenMetricsVersion_0_0_1, expfmt.OpenMetricsVersion_1_0_0:
			return pageOpenMetrics, nil
		default:
			return 0, fmt.Errorf("unsupported OpenMetrics version %q", v)
		}
	case expfmt.ProtoType:
		// Only text formats are asked for; a protobuf answer is a
		// misconfigured endpoint, not something to guess at.
		return 0, fmt.Errorf("unsupported content type %q", mt)
	}
	return pageText, nil
}

// ParsePage parses an exposition page (Prometheus text 0.0.4 or OpenMetrics
// 1.0, chosen by contentType as an HTTP Content-Type header value; empty
// means text) into metric families, keyed by family name. Names are
// validated as UTF-8, so legacy names with ':' (vllm:num_requests_waiting)
// and quoted UTF-8 names both parse. expfmt names an OpenMetrics counter
// family like the text format does, with "_total", and folds "_created"
// into the counter; in the text format "_created" is a separate gauge
// family. Anything that is not a valid page is a *ScrapeError of kind
// FailParse.
func ParsePage(body []byte, contentType string) (fams map[string]*dto.MetricFamily, err error) {
	format, err := pageFormatOf(contentType)
	if err != nil {
		return nil, &ScrapeError{Kind: FailParse, Err: err}
	}
	// The page is untrusted input: a panic in the parser must not take the
	// scraper down with it.
	defer func() {
		if r := recover(); r != nil {
			fams, err = nil, &ScrapeError{Kind: FailParse, Err: fmt.Errorf("parser panic: %v", r)}
		}
	}()
	switch format {
	case pageOpenMetrics:
		fams, err = parseOpenMetrics(body)
	default:
		// The zero TextParser has no validation scheme and panics on the
		// first name; NewTextParser is required.
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err = p.TextToMetricFamilies(bytes.NewReader(body))
	}
	if err != nil {
		return nil, &ScrapeError{Kind: FailParse, Err: err}
	}
	return fams, nil
}

func parseOpenMetrics(body []byte) (map[string]*dto.MetricFamily, error) {
	dec := expfmt.NewDecoder(bytes.NewReader(body), openMetricsDecodeFormat)
	fams := make(map[string]*dto.MetricFamily)
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			return fams, nil
		}
		if err != nil {
			return nil, err
		}
		// A counter "x" and a gauge "x_total" both end up as "x_total".
		if _, dup := fams[mf.GetName()]; dup {
			return nil, fmt.Errorf("metric family %q appears twice", mf.GetName())
		}
		fams[mf.GetName()] = mf
	}
}

// ParseSignals parses a page and applies a profile: ParsePage, then
// Extract. It is the scrape-to-signals path.
func ParseSignals(p *Profile, model string, body []byte, contentType string) (Signals, error) {
	fams, err := ParsePage(body, contentType)
	if err != nil {
		return nanSignals(), err
	}
	return Extract(p, model, fams)
}
