package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kvxds/kvxds/status"
)

// watchInterval is how often --watch refreshes.
const watchInterval = 2 * time.Second

// statusCmd prints what a running kvxds knows: its pools, their replicas
// (the ones that need attention first) and the data planes connected.
func statusCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", "127.0.0.1:19000", "kvxds admin address")
	watch := fs.Bool("watch", false, "refresh every 2 s until interrupted")
	raw := fs.Bool("json", false, "print the status as JSON, as GET "+status.Path+" returns it")
	var access adminAccess
	fs.StringVar(&access.tokenFile, "token-file", "", "file holding the admin token (admin token_file); default $"+adminTokenEnv)
	fs.StringVar(&access.caFile, "tls-ca", "", "CA file (PEM) that signed the admin server's certificate (admin tls); implies https")
	fs.StringVar(&access.certFile, "tls-cert", "", "client certificate file (PEM), if the admin tls block has a client_ca_file")
	fs.StringVar(&access.keyFile, "tls-key", "", "client private key file (PEM), with --tls-cert")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kvxds status: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	url := *admin
	if !strings.Contains(url, "://") {
		url = access.scheme() + url
	}
	url = strings.TrimSuffix(url, "/") + status.Path
	tty := isTerminal(stdout)
	color := tty && os.Getenv("NO_COLOR") == ""
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	client, err := access.client(5 * time.Second)
	if err != nil {
		fmt.Fprintf(stderr, "kvxds status: %v\n", err)
		return 2
	}
	for {
		body, err := fetchStatus(ctx, client, url)
		switch {
		case err != nil && !*watch:
			fmt.Fprintf(stderr, "kvxds status: %v\n", err)
			return 1
		case err != nil:
			fmt.Fprintf(stderr, "kvxds status: %v (retrying)\n", err)
		case *raw:
			stdout.Write(body)
		default:
			var st status.Status
			if err := json.Unmarshal(body, &st); err != nil {
				fmt.Fprintf(stderr, "kvxds status: %s: %v\n", url, err)
				return 1
			}
			if *watch && tty {
				fmt.Fprint(stdout, "\x1b[H\x1b[2J") // home, clear: redraw in place
			}
			printStatus(stdout, &st, color)
		}
		if !*watch {
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(watchInterval):
		}
		if !tty {
			fmt.Fprintln(stdout)
		}
	}
}

func fetchStatus(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return body, nil
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// ANSI colours.
const (
	red    = "\x1b[31m"
	yellow = "\x1b[33m"
	green  = "\x1b[32m"
	dim    = "\x1b[2m"
	bold   = "\x1b[1m"
	reset  = "\x1b[0m"
)

// cell is one table cell and its colour (none if empty).
type cell struct{ text, color string }

// table writes rows with columns padded to their widest cell, colouring
// cells after padding so that escape codes do not skew the alignment.
type table struct {
	rows  [][]cell
	color bool
}

func (t *table) add(cells ...cell) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer, indent string) {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c.text))
		}
	}
	for _, r := range t.rows {
		var b strings.Builder
		b.WriteString(indent)
		for i, c := range r {
			text := c.text
			if i < len(r)-1 {
				text += strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c.text)+2)
			}
			if t.color && c.color != "" {
				text = c.color + strings.TrimRight(text, " ") + reset + text[len(strings.TrimRight(text, " ")):]
			}
			b.WriteString(text)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

func plain(s string) cell { return cell{text: s} }

// printStatus writes st as tables: the instance, each pool and its
// replicas (in status.SortReplicas's order), and the data planes.
func printStatus(w io.Writer, st *status.Status, color bool) {
	paint := func(s, c string) string {
		if !color {
			return s
		}
		return c + s + reset
	}
	role, trouble := st.HA.Role()
	if trouble != "" {
		role += paint(" ("+trouble+")", red)
	}
	fmt.Fprintf(w, "%s %s %s  %s  %s\n", paint("kvxds", bold), st.Instance.ID, cmp.Or(st.Instance.Version, "(devel)"), role,
		st.Time.UTC().Format("2006-01-02 15:04:05 UTC"))
	if st.Instance.Policy != "" {
		fmt.Fprintf(w, "policy %s\n", st.Instance.Policy)
	}
	for _, p := range st.Pools {
		fmt.Fprintln(w)
		printPool(w, st, &p, color, paint)
	}
	fmt.Fprintln(w)
	if len(st.DataPlanes) == 0 {
		fmt.Fprintln(w, paint("DATA PLANES", bold)+"  none connected")
		return
	}
	fmt.Fprintln(w, paint("DATA PLANES", bold))
	t := &table{color: color}
	t.add(cell{"NODE", dim}, cell{"KIND", dim}, cell{"ADDRESS", dim}, cell{"STREAMS", dim}, cell{"CONNECTED", dim}, cell{"STATE", dim})
	for _, dp := range st.DataPlanes {
		state, c := dataPlaneState(st, &dp)
		streams := strconv.Itoa(dp.Streams)
		if dp.Delta {
			streams += " delta"
		}
		t.add(plain(dp.NodeID), plain(dp.Kind), plain(dp.Address), plain(streams), plain(ago(st.Time, dp.Connected)), cell{state, c})
	}
	t.write(w, "  ")
	for _, dp := range st.DataPlanes {
		if dp.NoHash != "" {
			fmt.Fprintln(w, "  "+paint(fmt.Sprintf("node %s: %s; served without a ring hash: no session affinity", dp.NodeID, dp.NoHash), yellow))
		}
	}
}

func printPool(w io.Writer, st *status.Status, p *status.Pool, color bool, paint func(string, string) string) {
	kind := p.Balancer
	if p.Algorithm != "" {
		kind += "/" + p.Algorithm
	}
	if p.BalanceOn != "" {
		kind += ", bound on " + p.BalanceOn
	}
	head := []string{paint("POOL "+p.Name, bold), kind}
	if p.Engine != "" {
		head = append(head, p.Engine)
	}
	head = append(head, plural(len(p.Replicas), "replica"))
	if p.HitRate1m != nil {
		head = append(head, "hit rate 1m "+percent(p.HitRate1m))
	}
	if p.Balance != nil || p.BalanceNote != "" {
		head = append(head, "balance "+status.TextFormat.Balance(p))
	}
	if p.Engine != "" {
		head = append(head, fmt.Sprintf("escapes 1h %d", p.Escapes1h), fmt.Sprintf("weight moves 1h %d", p.WeightMoves1h))
	}
	fmt.Fprintln(w, strings.Join(head, "  "))
	if hot := status.TextFormat.Hotspot(st.HotspotRule, p); hot != "" {
		fmt.Fprintln(w, paint("  HOTSPOT: "+hot, red))
	}
	if p.Fallback {
		fmt.Fprintln(w, paint("  FALLBACK: too many replicas saturated to take any out; pure affinity", red))
	}
	for _, l := range status.TextFormat.MovedLines(st.Time, p.Name, p.Moved) {
		fmt.Fprintln(w, "  "+l)
	}
	for _, l := range status.TextFormat.HotKeyLines(p.HotKeys) {
		fmt.Fprintln(w, "  "+l)
	}
	for _, l := range status.TextFormat.AdapterLines(p.Adapters) {
		fmt.Fprintln(w, "  "+l)
	}
	for _, l := range status.TextFormat.PrefillLines(p.Prefill) {
		fmt.Fprintln(w, "  "+l)
	}
	for _, n := range p.SignalNotes() {
		if n.Level == status.OK {
			fmt.Fprintln(w, "  signal "+n.Text)
		} else {
			fmt.Fprintln(w, paint("  SIGNAL "+n.Text, yellow))
		}
	}
	if len(p.Replicas) == 0 {
		return
	}
	reps := status.SortReplicas(p.Replicas)
	t := &table{color: color}
	t.add(cell{"ID", dim}, cell{"ADDRESS", dim}, cell{"HEALTH", dim}, cell{"WEIGHT", dim}, cell{"SHARE", dim},
		cell{"QUEUE", dim}, cell{"KV", dim}, cell{"HIT 1M", dim}, cell{"TTFT P95", dim}, cell{"", ""})
	for _, r := range reps {
		weight := strconv.FormatUint(uint64(r.Weight), 10)
		if r.Multiplier != 0 {
			weight = fmt.Sprintf("%d (%d×%d)", r.Weight, r.StaticWeight, r.Multiplier)
		}
		note := status.TextFormat.ReplicaNote(st.Time, &r)
		if !r.Since.IsZero() && r.Health != status.Serving {
			note = strings.TrimSuffix("since "+ago(st.Time, r.Since)+": "+note, ": ")
		}
		t.add(plain(r.ID), plain(r.Address), cell{string(r.Health), levelColor[status.HealthLevel(r.Health)]}, plain(weight), plain(percent(r.TableShare)),
			plain(number(r.QueueDepth)), plain(percent(r.KVOccupancy)), plain(percent(r.HitRate1m)), plain(seconds(r.TTFTP95)), plain(note))
	}
	t.write(w, "  ")
}

// levelColor is the colour of a level of attention.
var levelColor = map[status.Level]string{status.OK: green, status.Warn: yellow, status.Bad: red}

// dataPlaneState compares what a data plane accepted with what its kind
// is served, naming a rejection in full.
func dataPlaneState(st *status.Status, dp *status.DataPlane) (string, string) {
	sync := st.DataPlaneSync(dp)
	if n := sync.Rejected; n != nil {
		return fmt.Sprintf("NACK %s %s %s: %s", n.Type, n.Version, ago(st.Time, n.Time), n.Message), levelColor[sync.Level]
	}
	return sync.String(), levelColor[sync.Level]
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// Figures as the table writes them.
var (
	number  = status.TextFormat.Number
	percent = status.TextFormat.Percent
	seconds = status.TextFormat.Seconds
	ago     = status.TextFormat.Ago
)
