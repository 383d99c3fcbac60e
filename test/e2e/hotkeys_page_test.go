package e2e

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/status/page"
)

// The status page in a browser shows a pool's hot keys, hashed, and the
// requests sent away from their key's first replica, from the reconcile
// step's golden status document (a tenant key hot over 4 buckets).
func TestStatusPageHotKeysInBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	browser := newBrowser(t, ctx, 1280, 900)
	body, err := os.ReadFile("../../reconcile/testdata/status/status.json")
	if err != nil {
		t.Fatal(err)
	}
	var st status.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(page.Handler(func() status.Status { return st }))
	defer srv.Close()
	if err := chromedp.Do(browser, chromedp.Navigate(srv.URL+"/?refresh=0")); err != nil {
		t.Fatal(err)
	}
	lines, err := chromedp.Run(browser, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("p.hot-keys")).filter(p => p.getClientRects().length > 0).map(p => p.innerText)`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"hot keys of 1200 keyed requests logged: 7007a66b (header x-session-id) 42.0% spread over 64; 5f3824a9 (header x-session-id) 8.0% spread over 2 for its replica",
		"away from their key's first replica: 34.2% (spread 31.7%, escape 2.0%, followed 0.0%, bound 0.5%)",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("the page shows\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
