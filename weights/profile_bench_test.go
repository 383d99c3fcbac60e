package weights

import "testing"

// BenchmarkParseVLLMPage is the scrape-to-signals path on a realistic vLLM
// V1 page (≈350 series with the runtime and HTTP families).
func BenchmarkParseVLLMPage(b *testing.B) {
	benchmarkParse(b, "vllm_v1.txt", ctText)
}

// BenchmarkParseVLLMPageOpenMetrics is the same page in OpenMetrics, the
// format the scraper asks for first. (expfmt v0.73's own OpenMetrics
// decoder, an ABNF grammar run per line, took ~630 ms, 855 MB and 5.2M
// allocations for this page; see profile_page.go.)
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

// BenchmarkParsePageVLLM is the whole-page parse (ParsePage + Extract)
// that ParseSignals avoids by handing the parser only the profile's lines.
func BenchmarkParsePageVLLM(b *testing.B) {
	body := readPage(b, "vllm_v1.txt")
	p := mustProfile(b, "vllm")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		fams, err := ParsePage(body, ctText)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Extract(p, "", fams); err != nil {
			b.Fatal(err)
		}
	}
}
