// Package page is the status page: the status document (package status)
// as one HTML page, rendered on the server, that loads nothing from
// elsewhere. Its words and figures are package status's Format, the same
// `kvxds status` writes.
package page

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kvxds/kvxds/status"
)

// Path is where the admin server serves the status page.
const Path = "/"

// Replicas is how many replicas of a pool the page lists before it
// collapses the rest into a count (all=1 lists them all).
const Replicas = 50

// DefaultRefresh is how often the page reloads itself, in seconds.
const DefaultRefresh = 5

//go:embed page.html.tmpl
var pageSource string

// format is the page's typography.
var format = status.PageFormat

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"percent": format.Percent,
	"number":  format.Number,
	"seconds": format.Seconds,
	"ago":     format.Ago,
	"clock":   func(t time.Time) string { return t.UTC().Format("15:04:05") },
	"short":   shortVersion,
}).Parse(pageSource))

// Handler serves the status that build returns as an HTML page (GET /
// on the admin address): each pool's figures, its replicas with their
// health, weights, table share and signals, with a sparkline of the last
// 15 minutes of queue, hit rate and TTFT; its recent decisions; and the
// connected data planes. Query parameters: all=1 lists every replica
// (otherwise Replicas per pool, the ones that matter first),
// refresh=N reloads the page every N seconds (0: never; default
// DefaultRefresh). Nothing on the page loads from elsewhere.
func Handler(build func() status.Status) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		opts := Options{All: q.Get("all") == "1", Refresh: DefaultRefresh}
		if v := q.Get("refresh"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				http.Error(w, fmt.Sprintf("refresh=%q: want a whole number of seconds, 0 for never", v), http.StatusBadRequest)
				return
			}
			opts.Refresh = n
		}
		st := build()
		var buf bytes.Buffer
		if err := Render(&buf, &st, opts); err != nil {
			http.Error(w, "rendering the status page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		// Everything is inline: nothing may load from another origin.
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; connect-src 'self'")
		w.Write(buf.Bytes())
	})
}

// Options are the page's query parameters.
type Options struct {
	All     bool // list every replica
	Refresh int  // seconds between reloads; 0: never
}

// Render writes the status page of st.
func Render(w io.Writer, st *status.Status, opts Options) error {
	if err := pageTemplate.Execute(w, newPageData(st, opts)); err != nil {
		return fmt.Errorf("status page: %w", err)
	}
	return nil
}

type pageData struct {
	St         *status.Status
	Opts       Options
	Pools      []pagePool
	DataPlanes []pageDataPlane
	Role       string // and what troubles it, in parentheses
	AllURL     string // the same page with every replica
	LessURL    string // the same page, collapsed
}

type pagePool struct {
	*status.Pool
	Kind        string
	BalanceText string // the balance, or why it is unknown
	Rows        []pageReplica
	Hidden      int
	Health      []status.HealthCount // replicas per health, worst first
	// HiddenHealth counts the replicas not listed, per health.
	HiddenHealth []status.HealthCount
	Hot          string   // why it is a hotspot
	Moved        []string // what the pushes cost its sessions
	HotKeyLines  []string // its hot keys and the requests sent away
	AdapterLines []string // where its LoRA adapters are placed
	PrefillLines []string // where a decode pool's requests prefill
	// Signals are the profile's signals replicas' pages lacked;
	// SignalsOK says none did.
	Signals   []status.SignalNote
	SignalsOK string
}

type pageReplica struct {
	*status.Replica
	Note       string // reason, last scrape error
	Share      float64
	ShareWidth string // of the bar, percent
	Spark      struct{ Queue, HitRate, TTFT template.HTML }
}

type pageDataPlane struct {
	*status.DataPlane
	State, Class string
	Types        []ackedType
}

type ackedType struct {
	Type, Version string
	Current       bool // equal to what its kind is served
}

func newPageData(st *status.Status, opts Options) *pageData {
	d := &pageData{St: st, Opts: opts}
	role, trouble := st.HA.Role()
	d.Role = role
	if trouble != "" {
		d.Role += " (" + trouble + ")"
	}
	q := url.Values{}
	if opts.Refresh != DefaultRefresh {
		q.Set("refresh", strconv.Itoa(opts.Refresh))
	}
	d.LessURL = "?" + q.Encode()
	q.Set("all", "1")
	d.AllURL = "?" + q.Encode()
	for i := range st.Pools {
		d.Pools = append(d.Pools, newPagePool(st, &st.Pools[i], opts.All))
	}
	for i := range st.DataPlanes {
		dp := &st.DataPlanes[i]
		pd := pageDataPlane{DataPlane: dp}
		sync := st.DataPlaneSync(dp)
		pd.State, pd.Class = sync.String(), sync.Level.String()
		served := st.Served[dp.Kind]
		for _, typ := range status.ShortTypes {
			v, ok := dp.ACKed[typ]
			if !ok && served[typ] == "" {
				continue
			}
			pd.Types = append(pd.Types, ackedType{Type: typ, Version: v, Current: ok && v == served[typ]})
		}
		d.DataPlanes = append(d.DataPlanes, pd)
	}
	return d
}

func newPagePool(st *status.Status, p *status.Pool, all bool) pagePool {
	pp := pagePool{Pool: p, Kind: p.Balancer, BalanceText: format.Balance(p), Hot: format.Hotspot(st.HotspotRule, p)}
	if p.Algorithm != "" {
		pp.Kind += " · " + p.Algorithm
	}
	if p.BalanceOn != "" {
		pp.Kind += " · bound on " + strings.ReplaceAll(p.BalanceOn, "_", " ")
	}
	pp.Moved = format.MovedLines(st.Time, p.Name, p.Moved)
	pp.HotKeyLines = format.HotKeyLines(p.HotKeys)
	pp.AdapterLines = format.AdapterLines(p.Adapters)
	pp.PrefillLines = format.PrefillLines(p.Prefill)
	pp.Signals = p.SignalNotes()
	if len(pp.Signals) == 0 && p.PagesRead > 0 {
		pp.SignalsOK = fmt.Sprintf("Every signal the %s profile reads was found on %s.", p.Engine, pagesRead(p.PagesRead))
	}
	reps := status.SortReplicas(p.Replicas)
	pp.Health = status.CountHealth(reps)
	shown := reps
	if !all && len(reps) > Replicas {
		shown, pp.Hidden = reps[:Replicas], len(reps)-Replicas
		pp.HiddenHealth = status.CountHealth(reps[Replicas:])
	}
	end := st.Time
	for i := range shown {
		r := &shown[i]
		row := pageReplica{Replica: r, Note: format.ReplicaNote(st.Time, r)}
		if r.TableShare != nil {
			row.Share = *r.TableShare
			row.ShareWidth = strconv.FormatFloat(math.Round(min(max(*r.TableShare, 0), 1)*1000)/10, 'f', -1, 64)
		}
		if r.Trend != nil {
			pts, step := r.Trend.Points, time.Duration(r.Trend.StepSeconds*float64(time.Second))
			row.Spark.Queue = Sparkline(pts, step, end, func(p *status.TrendPoint) *float64 { return p.QueueDepth }, 0, "queue depth", format.Number)
			row.Spark.HitRate = Sparkline(pts, step, end, func(p *status.TrendPoint) *float64 { return p.HitRate }, 1, "hit rate", format.Percent)
			row.Spark.TTFT = Sparkline(pts, step, end, func(p *status.TrendPoint) *float64 { return p.TTFTP95 }, 0, "TTFT p95", format.Seconds)
		}
		pp.Rows = append(pp.Rows, row)
	}
	return pp
}

// Sparkline size, in CSS pixels.
const (
	sparkWidth  = 96
	sparkHeight = 22
)

// Sparkline draws get(point) over the TrendWindow-long span ending at
// end as an inline SVG: a line per run of consecutive steps (a step
// without a value leaves a gap), scaled from 0 to the larger of top and
// the highest value, the latest value marked. Its title names the range.
// Empty when no point has a value.
func Sparkline(pts []status.TrendPoint, step time.Duration, end time.Time, get func(*status.TrendPoint) *float64, top float64, what string, format func(*float64) string) template.HTML {
	const window = 15 * time.Minute
	if step <= 0 {
		step = 15 * time.Second
	}
	start := end.Add(-window)
	lo, vmax := math.Inf(1), math.Inf(-1)
	for i := range pts {
		if v := get(&pts[i]); v != nil {
			lo, vmax = min(lo, *v), max(vmax, *v)
		}
	}
	if math.IsInf(lo, 1) {
		return ""
	}
	hi := max(top, vmax)
	if hi <= 0 {
		hi = 1
	}
	x := func(t time.Time) float64 {
		f := float64(t.Add(step/2).Sub(start)) / float64(window)
		return math.Round(min(max(f, 0), 1)*sparkWidth*10) / 10
	}
	y := func(v float64) float64 {
		return math.Round((sparkHeight-2-(v/hi)*(sparkHeight-4))*10) / 10
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" width="%d" height="%d" viewBox="0 0 %d %d" role="img">`, sparkWidth, sparkHeight, sparkWidth, sparkHeight)
	last := &pts[len(pts)-1]
	fmt.Fprintf(&b, "<title>%s, last 15 min: %s to %s</title>", template.HTMLEscapeString(what),
		template.HTMLEscapeString(format(&lo)), template.HTMLEscapeString(format(&vmax)))
	fmt.Fprintf(&b, `<line class="base" x1="0" y1="%d" x2="%d" y2="%d"/>`, sparkHeight-2, sparkWidth, sparkHeight-2)
	var run []string
	var prev time.Time
	flush := func() {
		switch len(run) {
		case 0:
		case 1:
			xy := strings.Split(run[0], ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="1.2"/>`, xy[0], xy[1])
		default:
			fmt.Fprintf(&b, `<polyline points="%s"/>`, strings.Join(run, " "))
		}
		run = run[:0]
	}
	var lastX, lastY float64
	for i := range pts {
		p := &pts[i]
		v := get(p)
		if v == nil || (len(run) > 0 && p.Time.Sub(prev) > step*3/2) {
			flush()
		}
		if v == nil {
			continue
		}
		lastX, lastY = x(p.Time), y(*v)
		run = append(run, strconv.FormatFloat(lastX, 'f', -1, 64)+","+strconv.FormatFloat(lastY, 'f', -1, 64))
		prev = p.Time
	}
	flush()
	if get(last) != nil {
		fmt.Fprintf(&b, `<circle class="now" cx="%s" cy="%s" r="2"/>`, strconv.FormatFloat(lastX, 'f', -1, 64), strconv.FormatFloat(lastY, 'f', -1, 64))
	}
	b.WriteString("</svg>")
	return template.HTML(b.String()) // numbers and escaped text only
}

// shortVersion shortens a resource version for display.
func shortVersion(v string) string {
	if len(v) > 10 {
		return v[:8] + "…"
	}
	return v
}

func pagesRead(n int) string {
	if n == 1 {
		return "the one page read"
	}
	return "each of the " + strconv.Itoa(n) + " pages read"
}
