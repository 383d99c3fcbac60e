package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strings"
	"sync"

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
// means text) into metric families, keyed by family name.
//
// Both formats go through expfmt's TextParser, with names validated as
// UTF-8 (legacy names with ':' such as vllm:num_requests_waiting and quoted
// UTF-8 names both parse). OpenMetrics is first rewritten into the text
// format (see profile_page.go for why): "# EOF" must end the page, counter
// families are keyed "x_total" as in the text format (and as expfmt's own
// OpenMetrics decoder keys them), _created samples are dropped, exemplars
// and UNIT lines ignored, timestamps turned into milliseconds. In the text
// format, _created series form gauge families of their own, which no
// profile reads. Anything that is not a valid page, and a series with more
// than maxLabelsPerSeries (64) labels, is a *ScrapeError of kind
// FailParse.
func ParsePage(body []byte, contentType string) (map[string]*dto.MetricFamily, error) {
	return parsePage(body, contentType, nil, "")
}

// notExposition reports a body that is no exposition page at all (JSON, as
// trtllm-serve answers on /metrics, or HTML, as a proxy's error page): what
// it is, and which path to set. enginePath, if set, is the engine's own
// Prometheus page. A text page never starts with '<', nor with valid JSON
// (a quoted UTF-8 name starts with '{' but is no JSON value).
func notExposition(body []byte, contentType, enginePath string) error {
	what := ""
	if mt, _, err := mime.ParseMediaType(contentType); err == nil {
		switch {
		case mt == "application/json" || strings.HasSuffix(mt, "+json"):
			what = "JSON"
		case mt == "text/html":
			what = "HTML"
		}
	}
	if what == "" {
		switch head := bytes.TrimLeft(body, " \t\r\n"); {
		case len(head) == 0:
		case head[0] == '<':
			what = "HTML"
		case (head[0] == '[' || head[0] == '{') && json.Valid(head):
			what = "JSON"
		}
	}
	if what == "" {
		return nil
	}
	got := what
	if contentType != "" {
		got += fmt.Sprintf(" (Content-Type %q)", contentType)
	}
	hint := "set path in the pool's metrics block to the engine's Prometheus page"
	if enginePath != "" {
		hint += fmt.Sprintf(" (this engine's is %q, the default)", enginePath)
	}
	return &ScrapeError{Kind: FailParse, Err: fmt.Errorf("got %s, not a Prometheus text or OpenMetrics page; %s", got, hint)}
}

var (
	textParsers = sync.Pool{New: func() any {
		// The zero TextParser has no validation scheme and panics on
		// the first name; NewTextParser is required.
		p := expfmt.NewTextParser(model.UTF8Validation)
		return &p
	}}
	pageBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}
)

// maxPooledBuffer bounds the buffers kept for reuse.
const maxPooledBuffer = 1 << 20

// parsePage parses a page; with keep set, only the families keep holds are
// guaranteed to be complete (see keepSet).
func parsePage(body []byte, contentType string, keep keepSet, enginePath string) (fams map[string]*dto.MetricFamily, err error) {
	if err := notExposition(body, contentType, enginePath); err != nil {
		return nil, err
	}
	format, err := pageFormatOf(contentType)
	if err != nil {
		return nil, &ScrapeError{Kind: FailParse, Err: err}
	}
	buf := pageBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledBuffer {
			pageBuffers.Put(buf)
		}
	}()
	input := body
	switch format {
	case pageOpenMetrics:
		err := openMetricsToText(body, keep, buf)
		if errors.Is(err, errUnclean) {
			buf.Reset()
			err = openMetricsToText(body, nil, buf)
		}
		if err != nil {
			return nil, &ScrapeError{Kind: FailParse, Err: err}
		}
		input = buf.Bytes()
	default:
		if keep != nil && filterText(body, keep, buf) == nil {
			input = buf.Bytes()
		}
	}
	return parseText(input)
}

func parseText(input []byte) (fams map[string]*dto.MetricFamily, err error) {
	if err := checkLabelCounts(input); err != nil {
		return nil, &ScrapeError{Kind: FailParse, Err: err}
	}
	p := textParsers.Get().(*expfmt.TextParser)
	// The page is untrusted input: a panic in the parser must not take
	// the scraper down with it. The parser is not reused after one.
	defer func() {
		if r := recover(); r != nil {
			fams, err = nil, &ScrapeError{Kind: FailParse, Err: fmt.Errorf("parser panic: %v", r)}
		}
	}()
	fams, err = p.TextToMetricFamilies(bytes.NewReader(input))
	textParsers.Put(p)
	if err != nil {
		return nil, &ScrapeError{Kind: FailParse, Err: err}
	}
	return fams, nil
}

// ParseSignals parses a page and applies a profile: ParsePage, then
// Extract, the scrape-to-signals path. It hands the parser only the lines
// of the families the profile reads, which come out exactly as ParsePage
// parses them, so the result is Extract's on ParsePage's families. The one
// difference: a page that ParsePage rejects only for a cross-line error in
// a family the profile does not read (a second HELP line, say) still
// yields signals here. Lines that are malformed in themselves, and
// truncated pages, fail here as there.
func ParseSignals(p *Profile, model string, body []byte, contentType string) (Signals, error) {
	var keep keepSet
	enginePath := ""
	if p != nil {
		keep, enginePath = profileKeepSet(p), p.MetricsPath
	}
	fams, err := parsePage(body, contentType, keep, enginePath)
	if err != nil {
		return nanSignals(), err
	}
	return Extract(p, model, fams)
}
