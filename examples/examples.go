// Package examples holds runnable kvxds policies. The chat policy is also
// kvxds's embedded default, served by `kvxds serve` without --policy.
package examples

import _ "embed"

// Chat is examples/chat.hcl.
//
//go:embed chat.hcl
var Chat []byte
