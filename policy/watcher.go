package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvxds/kvxds/filewatch"
)

// DefaultPollInterval is WatcherOptions.PollInterval when it is not set.
const DefaultPollInterval = 5 * time.Second

// WatcherOptions configures a Watcher. Every field is optional.
type WatcherOptions struct {
	// Logger receives load results; rejected policies are logged at
	// Error level with their formatted diagnostics, once per distinct
	// content. Defaults to a logger that discards everything.
	Logger hclog.Logger
	// OnReload is called with each new valid policy, from the goroutine
	// running Run: once when Run starts if the file was valid, then after
	// every change that yields a valid policy.
	OnReload func(*Policy)
	// Registerer, if not nil, registers kvxds_policy_reloads_total,
	// kvxds_policy_reload_errors_total and
	// kvxds_policy_last_reload_success.
	Registerer prometheus.Registerer
	// Debounce is how long the file must stay quiet after a change
	// before it is read, so that a burst of writes loads once.
	// Defaults to filewatch.DefaultDebounce.
	Debounce time.Duration
	// PollInterval is how often the file is read regardless of events,
	// in case a change is not notified (network file systems, a symlink
	// target outside the watched directories). Defaults to
	// DefaultPollInterval.
	PollInterval time.Duration
}

// Watcher keeps the last good policy of a file current.
//
// It watches the file's directory rather than the file, so that it sees
// the file being replaced by a rename (as editors and atomic writers do)
// and a Kubernetes ConfigMap's "..data" symlink being swapped. Any event,
// debounced, and a periodic poll make it re-read the file; it reloads only
// when the content differs from the last content read. A rejected policy
// never replaces the current one.
//
// An empty (whitespace-only) file is rejected although Parse accepts it:
// it is far more often a write caught halfway than a wish to remove every
// pool. A file of only comments serves no pools.
type Watcher struct {
	filename string // as given: diagnostics and logs use it
	path     string // absolute: what is read and watched
	opts     WatcherOptions
	log      hclog.Logger
	current  atomic.Pointer[Policy]

	// last identifies the content last read (successfully or not). It is
	// used by NewWatcher and then only by the goroutine running Run.
	last contentKey

	reloads      prometheus.Counter
	reloadErrors prometheus.Counter
	lastSuccess  prometheus.Gauge
}

// contentKey identifies what a read of the file returned.
type contentKey struct {
	sum [sha256.Size]byte
	err string
}

// NewWatcher loads filename and returns a Watcher for it. The file need not
// be valid, nor exist: Current is then nil until it becomes valid. The
// returned error is about the Watcher itself (such as metrics that cannot
// be registered), never about the policy.
func NewWatcher(filename string, opts WatcherOptions) (*Watcher, error) {
	if filename == "" {
		return nil, errors.New("policy: watcher needs a file name")
	}
	path, err := filepath.Abs(filename)
	if err != nil {
		return nil, fmt.Errorf("policy: resolving %s: %w", filename, err)
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	w := &Watcher{
		filename: filename,
		path:     path,
		opts:     opts,
		log:      opts.Logger,
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvxds_policy_reloads_total",
			Help: "Policy loads that succeeded, the first one included.",
		}),
		reloadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvxds_policy_reload_errors_total",
			Help: "Policy loads rejected because the file was unreadable or invalid.",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvxds_policy_last_reload_success",
			Help: "Whether the last policy load succeeded (1) or was rejected (0).",
		}),
	}
	if r := opts.Registerer; r != nil {
		var done []prometheus.Collector
		for _, c := range []prometheus.Collector{w.reloads, w.reloadErrors, w.lastSuccess} {
			if err := r.Register(c); err != nil {
				for _, d := range done {
					r.Unregister(d)
				}
				return nil, fmt.Errorf("policy: registering watcher metrics: %w", err)
			}
			done = append(done, c)
		}
	}
	w.check(false)
	return w, nil
}

// Current returns the last good policy, or nil if the file was never valid.
func (w *Watcher) Current() *Policy {
	return w.current.Load()
}

// Run watches the file until ctx is done, then returns nil. It returns an
// error only if the file's directory cannot be watched. Run must be called
// at most once.
func (w *Watcher) Run(ctx context.Context) error {
	if p := w.current.Load(); p != nil && w.opts.OnReload != nil {
		w.opts.OnReload(p)
	}
	err := filewatch.Run(ctx, filewatch.Options{
		Files:        []string{w.path},
		Debounce:     w.opts.Debounce,
		PollInterval: w.opts.PollInterval,
		Changed:      func() { w.check(true) },
		Log:          w.log.With("file", w.filename),
	})
	if err != nil {
		return fmt.Errorf("policy: %s: %w", w.filename, err)
	}
	return nil
}

// check reads the file and, if its content changed since the last read,
// loads it. notify says whether to call OnReload.
func (w *Watcher) check(notify bool) {
	data, err := os.ReadFile(w.path)
	var key contentKey
	if err != nil {
		key.err = err.Error()
	} else {
		key.sum = sha256.Sum256(data)
	}
	if key == w.last {
		return
	}
	w.last = key

	var p *Policy
	var diags hcl.Diagnostics
	switch {
	case err != nil:
		diags = hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Cannot read policy file",
			Detail:   fmt.Sprintf("%v.", err),
		}}
	case len(bytes.TrimSpace(data)) == 0:
		diags = hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Empty policy file",
			Detail:   "An empty file would remove every pool, and is usually a write caught halfway. To serve no pools on purpose, leave a comment in the file.",
			Subject:  &hcl.Range{Filename: w.filename, Start: hcl.InitialPos, End: hcl.InitialPos},
		}}
	default:
		p, diags = Parse(data, w.filename)
	}
	if diags.HasErrors() {
		// Count before logging: tests wait on the log line.
		w.reloadErrors.Inc()
		w.lastSuccess.Set(0)
		w.log.Error("policy rejected; keeping the last good policy", "file", w.filename, "diagnostics", Format(diags))
		return
	}
	if len(diags) > 0 {
		w.log.Warn("policy has warnings", "file", w.filename, "diagnostics", Format(diags))
	}
	w.current.Store(p)
	w.reloads.Inc()
	w.lastSuccess.Set(1)
	w.log.Info("policy loaded", "file", w.filename, "pools", len(p.Pools))
	if notify && w.opts.OnReload != nil {
		w.opts.OnReload(p)
	}
}
