package weights

import "testing"

// BenchmarkParseVLLMPage is the scrape-to-signals path on a realistic vLLM
// V1 page (≈350 series with the runtime and HTTP families).
func BenchmarkParseVLLMPage(b *testing.B) {
	benchmarkParse(b, "vllm_v1.txt", ctText)
}

// BenchmarkParseVLLMPageOpenMetrics is the same page in OpenMetrics, which
// expfmt v0.73 parses with an ABNF grammar: orders of magnitude slower, so
// scrapers should ask for the text format.
func BenchmarkParseVLLMPageOpenMetrics(b *testing.B) {
	benchmarkParse(b, "vllm_v1.openmetrics.txt", ctOM)
}

func benchmarkParse(b *testing.B, page, ct string) {
	body := readPage(b, page)
	p := mustProfile(b, "vllm")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseSignals(p, "", body, ct); err != nil {
			b.Fatal(err)
		}
	}
}
