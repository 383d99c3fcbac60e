//go:build !linux

package kube

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
