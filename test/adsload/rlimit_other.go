//go:build !unix

package adsload

import "math"

// RaiseFileLimit reports no limit where there is no RLIMIT_NOFILE.
func RaiseFileLimit() (uint64, error) { return math.MaxUint64, nil }
