package kvxds_test

import (
	"bufio"
	"cmp"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/kvxds/kvxds/discovery/dns"
	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
)

// The documentation is README.md and every Markdown file under docs/
// (development.md says what these tests hold it to).

// docFiles lists the documentation's Markdown files, slash-separated,
// relative to the repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// mdBlock is a line of Markdown outside code blocks, or a code block.
type mdBlock struct {
	line int    // 1-based line of the text, or of the block's opening fence
	text string // the line, or the block's content
	info string // the code block's info string; "" for a line of text
	code bool
}

// parseMarkdown splits a Markdown file into lines of text and fenced
// code blocks.
func parseMarkdown(t *testing.T, name string) []mdBlock {
	t.Helper()
	src, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []mdBlock
	var fence string // the open fence's backticks, with its indent
	var block *mdBlock
	sc := bufio.NewScanner(strings.NewReader(string(src)))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		if block != nil {
			if strings.HasPrefix(trimmed, "```") && strings.TrimSpace(trimmed) == strings.TrimSpace(fence) {
				out = append(out, *block)
				block = nil
				continue
			}
			// Content of an indented fence loses the fence's indent.
			indent := len(fence) - len(strings.TrimLeft(fence, " "))
			block.text += strings.TrimPrefix(line, strings.Repeat(" ", indent)) + "\n"
			continue
		}
		if strings.HasPrefix(trimmed, "```") {
			ticks := trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, "`"))]
			fence = line[:len(line)-len(trimmed)] + ticks
			block = &mdBlock{line: n, info: strings.TrimSpace(strings.TrimLeft(trimmed, "`")), code: true}
			continue
		}
		out = append(out, mdBlock{line: n, text: line})
	}
	if block != nil {
		t.Fatalf("%s:%d: code block never closed", name, block.line)
	}
	return out
}

var (
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	mdLink     = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]*)(?:\s+"[^"]*")?\)`)
	linkScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// anchors returns the anchors GitHub gives the headings of a Markdown
// file: the heading's text lowercased, every character but letters,
// digits, spaces, - and _ dropped, spaces turned into -, and a repeated
// anchor suffixed -1, -2, ...
func anchors(blocks []mdBlock) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, b := range blocks {
		if b.code {
			continue
		}
		m := heading.FindStringSubmatch(b.text)
		if m == nil {
			continue
		}
		// A link in a heading reads as its text.
		text := mdLink.ReplaceAllString(m[1], "$1")
		var s strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				s.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				s.WriteRune(r)
			}
		}
		a := s.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

// TestDocLinks checks every relative link of the documentation: its file
// exists, and its #anchor, if any, is a heading of that file.
func TestDocLinks(t *testing.T) {
	files := docFiles(t)
	parsed := map[string][]mdBlock{}
	blocksOf := func(name string) []mdBlock {
		if _, ok := parsed[name]; !ok {
			parsed[name] = parseMarkdown(t, name)
		}
		return parsed[name]
	}
	links := 0
	for _, name := range files {
		for _, b := range blocksOf(name) {
			if b.code {
				continue
			}
			// Code spans are text, not links.
			text := codeSpan.ReplaceAllString(b.text, "")
			for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
				target := m[2]
				if target == "" || linkScheme.MatchString(target) || strings.HasPrefix(target, "//") {
					continue
				}
				links++
				file, anchor, _ := strings.Cut(target, "#")
				dest := name
				if file != "" {
					dest = path.Join(path.Dir(name), file)
					if _, err := os.Stat(filepath.FromSlash(dest)); err != nil {
						t.Errorf("%s:%d: link %s: no such file %s", name, b.line, target, dest)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: link %s: an anchor into a file that is not Markdown", name, b.line, target)
					continue
				}
				if !anchors(blocksOf(dest))[anchor] {
					t.Errorf("%s:%d: link %s: %s has no heading with anchor #%s", name, b.line, target, dest, anchor)
				}
			}
		}
	}
	if links == 0 {
		t.Error("no relative links found: the link pattern is broken")
	}
}

// TestDocReachable checks that every page of docs/ can be reached from
// README.md in at most two links.
func TestDocReachable(t *testing.T) {
	files := docFiles(t)
	linksOf := func(name string) map[string]bool {
		out := map[string]bool{}
		for _, b := range parseMarkdown(t, name) {
			if b.code {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(b.text, ""), -1) {
				file, _, _ := strings.Cut(m[2], "#")
				if file != "" && !linkScheme.MatchString(file) && strings.HasSuffix(file, ".md") {
					out[path.Join(path.Dir(name), file)] = true
				}
			}
		}
		return out
	}
	reached := map[string]bool{"README.md": true}
	first := linksOf("README.md")
	for p := range first {
		reached[p] = true
		if _, err := os.Stat(p); err == nil {
			for q := range linksOf(p) {
				reached[q] = true
			}
		}
	}
	for _, f := range files {
		if !reached[f] {
			t.Errorf("%s is more than two links away from README.md", f)
		}
	}
}

// fragmentMark starts the first line of an hcl code block that holds
// only part of a policy; such a block is parsed as HCL but not loaded.
const fragmentMark = "# fragment"

// TestDocPolicies loads every hcl code block of the documentation as
// kvxds validate loads a policy file: an error fails, warnings pass.
func TestDocPolicies(t *testing.T) {
	dir := t.TempDir()
	blocks, fragments := 0, 0
	for _, name := range docFiles(t) {
		for _, b := range parseMarkdown(t, name) {
			if !b.code || b.info != "hcl" {
				continue
			}
			where := fmt.Sprintf("%s:%d", name, b.line)
			if strings.HasPrefix(b.text, fragmentMark) {
				fragments++
				if _, diags := hclsyntax.ParseConfig([]byte(b.text), where, hcl.InitialPos); diags.HasErrors() {
					t.Errorf("%s: the fragment is not HCL:\n%s", where, policy.Format(diags))
				}
				continue
			}
			blocks++
			file := filepath.Join(dir, fmt.Sprintf("block%d.hcl", blocks))
			if err := os.WriteFile(file, []byte(b.text), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, diags := policy.Load(file); diags.HasErrors() {
				t.Errorf("%s: the block is not a valid policy (mark a part of a policy with a first line %q):\n%s",
					where, fragmentMark+": ...", policy.Format(diags))
			}
		}
	}
	if blocks == 0 {
		t.Error("no hcl blocks found")
	}
	t.Logf("%d policies loaded, %d fragments parsed", blocks, fragments)
}

// defaultsPolicy sets only what is required, so that everything the
// defaults table lists takes its default.
const defaultsPolicy = `
pool "a" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static {
    endpoint "10.0.0.1:8000" {}
  }
  dns { name = "vllm.example" }
  kubernetes {
    namespace = "llm"
    service   = "vllm"
    port      = "http"
  }
  metrics {}
  escape {}
  weights {}
  mesh { eds_cluster_name = "outbound|8000||vllm.llm.svc.cluster.local" }
  group "g" {
    match {
      header = "x-tenant-id"
      values = ["t"]
    }
    replicas = 1
  }
}

pool "b" {
  port = 10001
  hash {
    key { prompt_prefix = 4096 }
  }
  metrics {
    signal "queue_depth" { metric = "q" }
  }
}

pool "c" {
  port           = 10002
  load_balancing = "least_request"
  prefill { pool = "b" }
}

pool "d" {
  port = 10003
  hash {
    key { header = "x-session-id" }
  }
  adapters {}
}

pool "e" {
  port = 10004
  hash {
    key { header = "x-session-id" }
  }
}

pool "f" {
  port           = 10005
  load_balancing = "least_request"
  prefill { pool = "e" }
}

ha {
  kubernetes {
    namespace = "kvxds"
    lease     = "l"
  }
}
`

// TestPolicyDefaults holds the defaults table of docs/reference/policy.md
// to the defaults the policy package applies: every row names an
// attribute read here from a decoded policy, and every attribute read
// here has a row.
func TestPolicyDefaults(t *testing.T) {
	p, diags := policy.Parse([]byte(defaultsPolicy), "defaults.hcl")
	if diags.HasErrors() {
		t.Fatalf("the defaults policy does not load:\n%s", policy.Format(diags))
	}
	a, b, c, d, e := &p.Pools[0], &p.Pools[1], &p.Pools[2], &p.Pools[3], &p.Pools[4]
	read := map[string]func() any{
		"xds.address":                     func() any { return p.XDSAddress },
		"xds.max_streams_per_address":     func() any { return p.XDS.MaxStreamsPerAddress },
		"xds.keepalive_time":              func() any { return p.XDS.Keepalive.Time },
		"xds.keepalive_timeout":           func() any { return p.XDS.Keepalive.Timeout },
		"xds.keepalive_min_ping_interval": func() any { return p.XDS.Keepalive.MinPingInterval },
		"admin.address":                   func() any { return p.AdminAddress },
		"pool.listen_address":             func() any { return a.ListenAddress },
		"pool.route_timeout":              func() any { return a.RouteTimeout },
		"pool.idle_timeout":               func() any { return a.IdleTimeout },
		"pool.load_balancing":             func() any { return a.Balancer },
		"pool.hash.algorithm":             func() any { return a.Hash.Algorithm },
		"pool.hash.table_size":            func() any { return a.Hash.TableSize },
		// Zero: the data planes' own minimum.
		"pool.hash.min_ring_size":  func() any { return cmp.Or(a.Hash.MinRingSize, fleet.DefaultMinRingSize) },
		"pool.hash.balance_factor": func() any { return a.Hash.BalanceFactor },
		"pool.hash.balance_factor with a prompt_prefix or conversation key": func() any { return b.Hash.BalanceFactor },
		// fleet.Hash.BalanceOn leaves requests, its default, empty.
		"pool.hash.balance_on": func() any { return cmp.Or(a.Hash.BalanceOn, fleet.BalanceOnRequests) },
		"pool.hash.balance_on with a prompt_prefix or conversation key and a balance_factor": func() any { return b.Hash.BalanceOn },
		"pool.hash.load_interval with balance_on = \"prompt_bytes\"":                         func() any { return b.Hash.LoadInterval },
		"pool.hash.balance_factor with an adapters block":                                    func() any { return d.Hash.BalanceFactor },
		"pool.hash.balance_on with an adapters block and a balance_factor":                   func() any { return d.Hash.BalanceOn },
		"pool.hash.balance_factor of a prefill pool keyed on headers alone":                  func() any { return e.Hash.BalanceFactor },
		"pool.hash.keyless": func() any { return a.Hash.Keyless },
		// Zero: the clients' own cap.
		"pool.hash.grpc_ring_cap":    func() any { return cmp.Or(a.Hash.GRPCRingCap, fleet.DefaultGRPCRingCap) },
		"pool.hash.max_body_bytes":   func() any { return b.Hash.MaxBodyBytes },
		"pool.hash.hot_keys.enabled": func() any { return a.Hash.Hot != nil },
		// Zero: one replica's fair share.
		"pool.hash.hot_keys.share":                  func() any { return a.Hash.Hot.Share },
		"pool.hash.hot_keys.max":                    func() any { return a.Hash.Hot.Max },
		"pool.hash.hot_keys.spread_by.conversation": func() any { return a.Hash.Hot.SpreadBy.Conversation },
		"pool.hash.hot_keys.log_cluster":            func() any { return a.Hash.Hot.LogCluster },
		"pool.hash.hot_keys.interval":               func() any { return a.Hash.Hot.Interval },
		"pool.hash.hot_keys.half_life":              func() any { return a.Hash.Hot.HalfLife },
		"pool.static.endpoint.weight":               func() any { return a.Static[0].Weight },
		"pool.dns.type":                             func() any { return a.DNS[0].Type },
		"pool.dns.refresh":                          func() any { return a.DNS[0].Refresh },
		"pool.dns.keep_for":                         func() any { return cmp.Or(a.DNS[0].KeepFor, dns.DefaultKeepFor(a.DNS[0].Refresh)) },
		"pool.kubernetes.node_locality":             func() any { return a.Kubernetes[0].NodeLocality },
		"pool.metrics.engine":                       func() any { return a.Metrics.Engine },
		"pool.metrics.interval":                     func() any { return a.Metrics.Interval },
		"pool.metrics.timeout":                      func() any { return a.Metrics.Timeout },
		"pool.metrics.stale_after":                  func() any { return a.Metrics.StaleAfter },
		"pool.metrics.path":                         func() any { return a.Metrics.Path },
		"pool.metrics.scheme":                       func() any { return a.Metrics.Scheme },
		"pool.metrics.signal.scale":                 func() any { return b.Metrics.Signals["queue_depth"].Scale },
		"pool.escape.max_queue_depth":               func() any { return a.Escape.MaxQueueDepth },
		"pool.escape.max_kv_occupancy":              func() any { return a.Escape.MaxKVOccupancy },
		"pool.escape.max_preemption_rate": func() any {
			return a.Escape.MaxPreemptionRate
		},
		"pool.escape.resume_queue_depth":  func() any { return a.Escape.ResumeQueueDepth },
		"pool.escape.resume_kv_occupancy": func() any { return a.Escape.ResumeKVOccupancy },
		"pool.escape.hold":                func() any { return a.Escape.Hold },
		"pool.escape.sustain":             func() any { return a.Escape.Sustain },
		// b's prompt_prefix key sets balance_factor.
		"pool.escape.sustain with a balance_factor": func() any { return b.Escape.Sustain },
		"pool.weights.max with a balance_factor":    func() any { return b.Weights.MaxWeight },
		"pool.weights.levels with a balance_factor": func() any { return b.Weights.Levels },
		"pool.escape.relative_queue":                func() any { return a.Escape.RelativeQueue },
		"pool.escape.relative_kv_margin":            func() any { return a.Escape.RelativeKVMargin },
		"pool.escape.max_saturated_fraction":        func() any { return a.Escape.MaxSaturatedFraction },
		"pool.weights.min":                          func() any { return a.Weights.MinWeight },
		"pool.weights.max":                          func() any { return a.Weights.MaxWeight },
		"pool.weights.levels":                       func() any { return a.Weights.Levels },
		"pool.weights.smoothing":                    func() any { return a.Weights.Smoothing },
		"pool.weights.hysteresis":                   func() any { return a.Weights.Hysteresis },
		"pool.weights.min_interval":                 func() any { return a.Weights.MinChangeInterval },
		"pool.weights.relative":                     func() any { return a.Weights.Relative },
		"pool.mesh.istio_mtls":                      func() any { return a.Mesh.IstioMTLS },
		"pool.group.exclusive":                      func() any { return a.Groups[0].Exclusive },
		"pool.adapters.header":                      func() any { return d.LoRA.Header },
		"pool.adapters.body_field":                  func() any { return d.LoRA.BodyField },
		"pool.adapters.max_lora":                    func() any { return d.LoRA.MaxLoRA },
		"pool.adapters.max":                         func() any { return d.LoRA.Max },
		"pool.adapters.interval":                    func() any { return d.LoRA.Interval },
		"pool.adapters.half_life":                   func() any { return d.LoRA.HalfLife },
		"pool.prefill.header":                       func() any { return c.Prefill.Header },
		"pool.prefill.min_body_bytes":               func() any { return c.Prefill.MinBodyBytes },
		"ha.kubernetes.lease_duration":              func() any { return p.HA.Kubernetes.LeaseDuration },
		"ha.kubernetes.renew_deadline":              func() any { return p.HA.Kubernetes.RenewDeadline },
		"ha.kubernetes.retry_period":                func() any { return p.HA.Kubernetes.RetryPeriod },
	}

	rows := readDefaultsTable(t, "docs/reference/policy.md")
	seen := map[string]bool{}
	for _, r := range rows {
		where := fmt.Sprintf("docs/reference/policy.md:%d", r.line)
		get, ok := read[r.attr]
		if !ok {
			t.Errorf("%s: %q: no such attribute in this test; add how to read its default", where, r.attr)
			continue
		}
		if seen[r.attr] {
			t.Errorf("%s: %q listed twice", where, r.attr)
		}
		seen[r.attr] = true
		if err := sameDefault(r.value, get()); err != nil {
			t.Errorf("%s: %s: %v", where, r.attr, err)
		}
	}
	for attr := range read {
		if !seen[attr] {
			t.Errorf("docs/reference/policy.md: the defaults table has no row for %q", attr)
		}
	}
}

type defaultRow struct {
	line        int
	attr, value string
}

// readDefaultsTable reads the table under the heading "Defaults": the
// first cell names the attribute (code spans as plain text), the first
// code span of the second cell is its default as written in a policy.
func readDefaultsTable(t *testing.T, name string) []defaultRow {
	t.Helper()
	var rows []defaultRow
	in := false
	for _, b := range parseMarkdown(t, name) {
		if b.code {
			continue
		}
		if m := heading.FindStringSubmatch(b.text); m != nil {
			in = m[1] == "Defaults"
			continue
		}
		if !in || !strings.HasPrefix(b.text, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(b.text, "|"), " | ")
		if len(cells) != 2 {
			t.Fatalf("%s:%d: a defaults row has two cells: %q", name, b.line, b.text)
		}
		value := codeSpan.FindString(cells[1])
		if value == "" {
			t.Fatalf("%s:%d: the default is not a code span: %q", name, b.line, cells[1])
		}
		rows = append(rows, defaultRow{
			line:  b.line,
			attr:  strings.ReplaceAll(strings.TrimSpace(cells[0]), "`", ""),
			value: strings.Trim(value, "`"),
		})
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no defaults table under a heading \"Defaults\"", name)
	}
	return rows
}

// sameDefault compares a default as a policy writes it ("30s", 0.9,
// "maglev", false) with the decoded value.
func sameDefault(doc string, got any) error {
	mismatch := func() error { return fmt.Errorf("the table says %s, the code %v", doc, got) }
	if d, ok := got.(time.Duration); ok {
		s, err := strconv.Unquote(doc)
		if err != nil {
			return fmt.Errorf("a duration is quoted, as in \"30s\": %s", doc)
		}
		want, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		if want != d {
			return mismatch()
		}
		return nil
	}
	v := reflect.ValueOf(got)
	switch v.Kind() {
	case reflect.String:
		s, err := strconv.Unquote(doc)
		if err != nil {
			return fmt.Errorf("a string is quoted: %s", doc)
		}
		if s != v.String() {
			return mismatch()
		}
	case reflect.Bool:
		b, err := strconv.ParseBool(doc)
		if err != nil {
			return err
		}
		if b != v.Bool() {
			return mismatch()
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseFloat(doc, 64)
		if err != nil || n != float64(v.Int()) {
			return mismatch()
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseFloat(doc, 64)
		if err != nil || n != float64(v.Uint()) {
			return mismatch()
		}
	case reflect.Float32, reflect.Float64:
		n, err := strconv.ParseFloat(doc, 64)
		if err != nil || n != v.Float() {
			return mismatch()
		}
	default:
		return fmt.Errorf("cannot compare a %T", got)
	}
	return nil
}
