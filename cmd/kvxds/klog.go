package main

import (
	"github.com/go-logr/logr"
	"github.com/hashicorp/go-hclog"
	"k8s.io/klog/v2"
)

// routeKlog sends client-go's logs (informers, leader election) through
// kvxds's logger instead of klog's own stderr format: its chatter at
// debug level, its errors as warnings (kvxds logs what they mean itself).
func routeKlog(log hclog.Logger) {
	klog.SetLogger(logr.New(klogSink{log: log}))
}

type klogSink struct {
	log hclog.Logger
	kv  []any
}

func (s klogSink) Init(logr.RuntimeInfo) {}

func (s klogSink) Enabled(level int) bool { return s.log.IsDebug() || s.log.IsTrace() }

func (s klogSink) Info(level int, msg string, kv ...any) {
	s.log.Debug(msg, append(append([]any{}, s.kv...), kv...)...)
}

func (s klogSink) Error(err error, msg string, kv ...any) {
	s.log.Warn(msg, append(append([]any{"error", err}, s.kv...), kv...)...)
}

func (s klogSink) WithValues(kv ...any) logr.LogSink {
	s.kv = append(append([]any{}, s.kv...), kv...)
	return s
}

func (s klogSink) WithName(name string) logr.LogSink {
	s.log = s.log.Named(name)
	return s
}
