package ha

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DecisionsPath is where an instance's admin server serves its Board.
const DecisionsPath = "/ha/decisions"

// Follower is an instance that serves another instance's decisions (the
// ha block's follow): it long-polls that instance's Board and never leads.
// When it cannot reach the other instance it keeps the last decisions it
// had (fail static) and says so, once per change of state.
type Follower struct {
	// URL is the followed instance's admin address, "http://host:port".
	URL string
	// Poll is how long one long poll waits; Retry how long to wait after
	// a failure. Zero means 30 s and 1 s.
	Poll, Retry time.Duration
	Logger      hclog.Logger
	Client      *http.Client
	// OnReach is called with whether the last attempt reached the
	// followed instance (for metrics and readiness).
	OnReach func(ok bool, err error)
}

func (f *Follower) Describe() string { return "following " + f.URL }

// LoadURL is where the follower reports its requests in flight: the
// instance it follows.
func (f *Follower) LoadURL() string { return f.URL }

// Publish refuses: a follower never decides.
func (f *Follower) Publish(context.Context, Document) error { return ErrNotLeader }

// Run polls until ctx ends.
func (f *Follower) Run(ctx context.Context, h Handler) {
	log := f.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	poll, retry := f.Poll, f.Retry
	if poll <= 0 {
		poll = 30 * time.Second
	}
	if retry <= 0 {
		retry = time.Second
	}
	client := f.Client
	if client == nil {
		client = &http.Client{}
	}
	h.Leading(false, 0)
	var etag string
	reached := true // until shown otherwise: log the first failure
	for ctx.Err() == nil {
		doc, next, err := f.fetch(ctx, client, etag, poll)
		if ctx.Err() != nil {
			return
		}
		if f.OnReach != nil {
			f.OnReach(err == nil, err)
		}
		switch {
		case err != nil && reached:
			log.Warn("cannot reach the followed instance; serving the last decisions it published", "url", f.URL, "error", err)
		case err == nil && !reached:
			log.Info("reached the followed instance again", "url", f.URL)
		}
		reached = err == nil
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
			continue
		}
		etag = next
		if doc != nil {
			h.Published(*doc)
		}
	}
}

// fetch long-polls once. It returns the document if it changed, and the
// ETag to wait on next.
func (f *Follower) fetch(ctx context.Context, client *http.Client, etag string, poll time.Duration) (*Document, string, error) {
	url := f.URL + DecisionsPath
	if etag != "" {
		url += "?wait=" + poll.String()
	}
	rctx, cancel := context.WithTimeout(ctx, poll+10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, "", err
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	next := resp.Header.Get("ETag")
	switch resp.StatusCode {
	case http.StatusOK:
		var doc Document
		if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&doc); err != nil {
			return nil, "", fmt.Errorf("reading decisions from %s: %w", f.URL, err)
		}
		return &doc, next, nil
	case http.StatusNotModified:
		return nil, next, nil
	case http.StatusNotFound:
		// Reached, but nothing published yet: wait for the first.
		return nil, next, nil
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, "", fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
}
