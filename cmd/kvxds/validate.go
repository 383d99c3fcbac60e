package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/reconcile"
	"github.com/kvxds/kvxds/weights"
)

// validate checks policy files as serve and render load them: errors fail,
// warnings are printed and pass (unless --strict), so that a CI check
// never blocks a policy kvxds would serve. For each valid file it says how
// each pool's replicas will be scraped, and with --probe scrapes the
// static endpoints once and says which signals their pages carry.
func validate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	strict := fs.Bool("strict", false, "fail on warnings too")
	probe := fs.Bool("probe", false, "scrape each pool's static endpoints once with its engine profile and report the signals found and missing")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "kvxds validate: no policy file given\nusage: kvxds validate [--strict] [--probe] FILE...")
		return 2
	}
	status := 0
	for _, name := range fs.Args() {
		p, diags := policy.Load(name)
		fmt.Fprint(stderr, policy.Format(diags))
		warnings := len(diags) - len(diags.Errs())
		switch {
		case diags.HasErrors():
			status = 1
			continue
		case warnings > 0 && *strict:
			fmt.Fprintf(stderr, "%s: %s, which --strict fails\n", name, plural(warnings, "warning"))
			status = 1
			continue
		case warnings > 0:
			fmt.Fprintf(stdout, "%s: ok (%s)\n", name, plural(warnings, "warning"))
		default:
			fmt.Fprintf(stdout, "%s: ok\n", name)
		}
		describeScraping(stdout, p)
		if *probe {
			if !probeScraping(stdout, p, *strict) {
				status = 1
			}
		}
	}
	return status
}

// describeScraping says, per pool, what kvxds will scrape and which
// metric names each signal is read from, so that a wrong engine, path or
// port shows before anything runs.
func describeScraping(w io.Writer, p *policy.Policy) {
	for _, pool := range p.Pools {
		if pf := pool.Prefill; pf != nil {
			fmt.Fprintf(w, "  pool %s: decode side; Envoy names each request's prefill replica of pool %s in %s\n", pool.Name, pf.Pool, pf.Header)
		}
		m := pool.Metrics
		if m == nil {
			fmt.Fprintf(w, "  pool %s: no metrics block: static weights\n", pool.Name)
			continue
		}
		prof, err := weights.ProfileFor(m.Engine, m.Signals)
		if err != nil {
			fmt.Fprintf(w, "  pool %s: %v\n", pool.Name, err)
			continue
		}
		port := "<serving port>"
		if m.Port != 0 {
			port = strconv.FormatUint(uint64(m.Port), 10)
		}
		fmt.Fprintf(w, "  pool %s: engine %s: scrapes %s://<replica>:%s%s every %s (timeout %s)", pool.Name, m.Engine,
			m.Scheme, port, m.Path, m.Interval, m.Timeout)
		if m.Model != "" {
			fmt.Fprintf(w, ", series of model %q", m.Model)
		}
		fmt.Fprintln(w)
		t := &table{}
		t.add(plain("SIGNAL"), plain("USED BY"), plain("METRIC (the first present wins)"))
		for _, sig := range weights.SignalNames() {
			var names []string
			for _, s := range prof.Series(sig) {
				names = append(names, s.String())
			}
			use := weights.SignalUse(sig)
			if len(names) == 0 {
				names, use = []string{"-"}, "not read"
			}
			t.add(plain(sig), plain(use), plain(strings.Join(names, " or ")))
		}
		t.write(w, "    ")
	}
}

// probeScraping scrapes each pool's static endpoints once, as the running
// kvxds would, and reports per replica what its page carried. It returns
// false if a page could not be read or carried none of the core signals,
// and under strict also if a page lacked a signal.
func probeScraping(w io.Writer, p *policy.Policy, strict bool) bool {
	ok := true
	md, err := fleet.Prepare(reconcile.Join(p, reconcile.StaticTargets(p), nil))
	if err != nil {
		fmt.Fprintf(w, "  probe: %v\n", err)
		return false
	}
	specs, bad := reconcile.ScrapeSpecs(p, md)
	for _, pool := range p.Pools {
		if pool.Metrics == nil {
			continue
		}
		if err := bad[pool.Name]; err != nil {
			fmt.Fprintf(w, "  probe pool %s: %v\n", pool.Name, err)
			ok = false
			continue
		}
		spec := specs[pool.Name]
		if len(spec.Targets) == 0 {
			fmt.Fprintf(w, "  probe pool %s: no static endpoints to probe (discovered replicas are probed only by a running kvxds: see kvxds status)\n", pool.Name)
			continue
		}
		prof, model := spec.Profile, spec.Model
		targets := spec.Targets
		for i := range targets {
			targets[i].Parse = func(body []byte, contentType string) (weights.Signals, error) {
				return weights.ParseSignals(prof, model, body, contentType)
			}
		}
		fmt.Fprintf(w, "  probe pool %s:\n", pool.Name)
		obs := weights.NewScraper(weights.ScraperOptions{Timeout: spec.Timeout, Pool: pool.Name}).Scrape(context.Background(), targets)
		t := &table{}
		for i, o := range obs {
			var verdict string
			switch {
			case o.Err != nil:
				verdict, ok = "failed: "+o.Err.Error(), false
			default:
				lacks := prof.Lacks(o.Signals.Carried())
				verdict = "ok: every signal found"
				if lacks != 0 {
					verdict = "ok, lacks " + strings.Join(usedBy(lacks), ", ")
					ok = ok && !strict
				}
			}
			t.add(plain(targets[i].ID), plain(targets[i].URL), plain(verdict))
		}
		t.write(w, "    ")
	}
	return ok
}

// usedBy names the signals of s, each with what it feeds unless it is
// only shown.
func usedBy(s weights.SignalSet) []string {
	var out []string
	for _, n := range s.Names() {
		if u := weights.SignalUse(n); u != weights.UseStatus {
			n += " (used by " + u + ")"
		}
		out = append(out, n)
	}
	return out
}
