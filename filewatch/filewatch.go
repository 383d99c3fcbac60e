// Package filewatch calls a function when files may have changed: on
// file-system events in their directories, debounced, and on a poll that
// catches what events miss (lost events, network file systems).
//
// It watches directories, not files, because editors and Kubernetes
// ConfigMap and Secret volumes replace a file by renaming another over it,
// or by swapping a "..data" symlink, which a watch on the file itself
// would not survive. It also watches the directory of each file's final
// symlink target, so that an in-place edit of a target is seen too.
package filewatch

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"
)

// DefaultDebounce is Options.Debounce when it is not set.
const DefaultDebounce = 100 * time.Millisecond

// Options configure Run.
type Options struct {
	// Files are the files to follow; empty names are skipped.
	Files []string
	// Debounce is how long the directories must stay quiet after an event
	// before Changed is called, so that a burst of events (a write, a
	// rename, a symlink swap) leads to one call. Defaults to
	// DefaultDebounce.
	Debounce time.Duration
	// PollInterval is how often Changed is called regardless of events.
	PollInterval time.Duration
	// Changed is called after a debounced event, at every poll, and once
	// as soon as the watch is set up (the files may have changed before).
	// Run calls it from its own goroutine, one call at a time.
	Changed func()
	// Log receives watch errors (warn) and unwatchable symlink targets
	// (debug); nil discards them.
	Log hclog.Logger
}

// Run follows the files until ctx is done, then returns nil. It returns an
// error only if a directory of the files cannot be watched, or if the
// watcher closes unexpectedly.
func Run(ctx context.Context, opts Options) error {
	log := opts.Log
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching files: %w", err)
	}
	defer fw.Close()
	dirs := dirsOf(opts.Files)
	for _, d := range dirs {
		if err := fw.Add(d); err != nil {
			return fmt.Errorf("watching %s: %w", d, err)
		}
	}
	followSymlinks(fw, opts.Files, dirs, log)
	opts.Changed()

	poll := time.NewTicker(opts.PollInterval)
	defer poll.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	closed := errors.New("file watcher closed unexpectedly")
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return closed
			}
			// Modes do not change content; everything else might, in a
			// file itself or in a symlink leading to it.
			if ev.Op == fsnotify.Chmod {
				continue
			}
			log.Trace("watched directory changed", "event", ev.String())
			debounce.Reset(opts.Debounce)
		case err, ok := <-fw.Errors:
			if !ok {
				return closed
			}
			// Events may have been lost (overflow): look anyway.
			log.Warn("watching files", "error", err)
			debounce.Reset(opts.Debounce)
		case <-debounce.C:
			opts.Changed()
			followSymlinks(fw, opts.Files, dirs, log)
		case <-poll.C:
			opts.Changed()
		}
	}
}

// dirsOf returns the directories of files, each once.
func dirsOf(files []string) []string {
	var out []string
	for _, name := range files {
		if name == "" {
			continue
		}
		abs, err := filepath.Abs(name)
		if err != nil {
			abs = name
		}
		if d := filepath.Dir(abs); !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// followSymlinks also watches the directories of the files' final targets
// and drops targets left behind by an earlier swap (a removed directory
// drops its own watch). Failures only cost latency: the poll still
// notices.
func followSymlinks(fw *fsnotify.Watcher, files, dirs []string, log hclog.Logger) {
	keep := slices.Clone(dirs)
	for _, name := range files {
		if name == "" {
			continue
		}
		resolved, err := filepath.EvalSymlinks(name)
		if err != nil {
			continue
		}
		if abs, err := filepath.Abs(resolved); err == nil {
			resolved = abs
		}
		target := filepath.Dir(resolved)
		if slices.Contains(keep, target) {
			continue
		}
		keep = append(keep, target)
		if !slices.Contains(fw.WatchList(), target) {
			if err := fw.Add(target); err != nil {
				log.Debug("cannot watch symlink target", "dir", target, "error", err)
			}
		}
	}
	for _, d := range fw.WatchList() {
		if !slices.Contains(keep, d) {
			_ = fw.Remove(d)
		}
	}
}
