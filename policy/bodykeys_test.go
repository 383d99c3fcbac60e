package policy

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/kvxds/kvxds/fleet"

	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

func TestBodyKeysDecoded(t *testing.T) {
	for _, tc := range []struct {
		name, hash string
		want       fleet.Hash
		warnings   int
	}{
		{
			name: "chain with defaults",
			hash: `key { header = "x-session-id" }
			       key { json_field = "prompt_cache_key" }
			       key { json_field = "metadata.conversation_id" }
			       key { prompt_prefix = 4096 }`,
			want: fleet.Hash{Keys: []fleet.HashKey{{Header: "x-session-id"}, {JSONField: "prompt_cache_key"},
				{JSONField: "metadata.conversation_id"}, {PromptPrefix: 4096}},
				MaxBodyBytes: DefaultMaxBodyBytes, BalanceFactor: DefaultPromptPrefixBalanceFactor},
			warnings: 1,
		},
		{
			name:     "json_field alone keeps balance_factor off",
			hash:     `key { json_field = "user" }`,
			want:     fleet.Hash{Keys: []fleet.HashKey{{JSONField: "user"}}, MaxBodyBytes: DefaultMaxBodyBytes},
			warnings: 1,
		},
		{
			name: "explicit settings",
			hash: `balance_factor = 200
			       max_body_bytes = 1048576
			       key { prompt_prefix = 8192 }`,
			want:     fleet.Hash{Keys: []fleet.HashKey{{PromptPrefix: 8192}}, MaxBodyBytes: 1 << 20, BalanceFactor: 200},
			warnings: 1,
		},
		{
			name: "conversation, then a prefix for other bodies",
			hash: `key { header = "x-session-id" }
			       key { conversation = true }
			       key { prompt_prefix = 4096 }`,
			want: fleet.Hash{Keys: []fleet.HashKey{{Header: "x-session-id"}, {Conversation: true}, {PromptPrefix: 4096}},
				MaxBodyBytes: DefaultMaxBodyBytes, BalanceFactor: DefaultPromptPrefixBalanceFactor},
			warnings: 1,
		},
		{
			name:     "conversation alone defaults balance_factor",
			hash:     `key { conversation = true }`,
			want:     fleet.Hash{Keys: []fleet.HashKey{{Conversation: true}}, MaxBodyBytes: DefaultMaxBodyBytes, BalanceFactor: DefaultPromptPrefixBalanceFactor},
			warnings: 1,
		},
		{
			name: "header keys with hot keys read the body for spread_by",
			hash: `key { header = "x-session-id" }`,
			want: fleet.Hash{Keys: []fleet.HashKey{{Header: "x-session-id"}}, MaxBodyBytes: DefaultMaxBodyBytes},
		},
		{
			name: "header keys with hot keys take a body limit",
			hash: `max_body_bytes = 65536
			       key { header = "x-session-id" }
			       hot_keys {
			         spread_by { prompt_prefix = 4096 }
			       }`,
			want: fleet.Hash{Keys: []fleet.HashKey{{Header: "x-session-id"}}, MaxBodyBytes: 65536},
		},
		{
			name: "header keys without hot keys need no body",
			hash: `key { header = "x-session-id" }
			       hot_keys { enabled = false }`,
			want: fleet.Hash{Keys: []fleet.HashKey{{Header: "x-session-id"}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "pool \"p\" {\n  port = 1\n  hash {\n" + tc.hash + "\n  }\n}\n"
			p, diags := Parse([]byte(src), "test.hcl")
			if diags.HasErrors() {
				t.Fatalf("errors:\n%s", Format(diags))
			}
			if n := countSeverity(diags, hcl.DiagWarning); n != tc.warnings {
				t.Errorf("%d warnings, want %d:\n%s", n, tc.warnings, Format(diags))
			}
			h := p.Pools[0].Hash
			got := fleet.Hash{Keys: h.Keys, MaxBodyBytes: h.MaxBodyBytes, BalanceFactor: h.BalanceFactor}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decoded %+v, want %+v", got, tc.want)
			}
		})
	}
}

func countSeverity(diags hcl.Diagnostics, s hcl.DiagnosticSeverity) int {
	n := 0
	for _, d := range diags {
		if d.Severity == s {
			n++
		}
	}
	return n
}

func TestBodyKeyHeader(t *testing.T) {
	if got := BodyKeyHeader(0); got != "x-kvxds-key-1" || !strings.HasPrefix(got, bodykey.HeaderPrefix) {
		t.Errorf("BodyKeyHeader(0) = %q", got)
	}
	if !(fleet.HashKey{PromptPrefix: 64}).Body() || !(fleet.HashKey{JSONField: "u"}).Body() || !(fleet.HashKey{Conversation: true}).Body() || (fleet.HashKey{Header: "h"}).Body() {
		t.Error("Body() misclassifies keys")
	}
}
