// Package netns gives tests and benchmarks pod-like addresses: a network
// namespace joined to the host by a veth pair, holding private addresses
// the host reaches. The Kubernetes API server refuses loopback addresses
// in EndpointSlices, so replicas that a real API server lists serve there.
//
// It needs root and iproute2 (ip).
package netns

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Net is one namespace and its addresses Prefix+"10", Prefix+"11", ...
type Net struct {
	Name   string
	Prefix string // "10.213.N."
	host   string
}

// Usable says why namespaces cannot be made here, or nil.
func Usable() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("network namespaces need iproute2's ip command")
	}
	return nil
}

func run(args ...string) error {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// New creates namespace number subnet (0-255) with n addresses
// 10.213.subnet.10, .11, ... (n ≤ 240). Close removes it; a namespace of
// the same number left over by a killed run is replaced.
func New(subnet, n int) (*Net, error) {
	return NewNamed(fmt.Sprintf("kvxds-%d", subnet), subnet, n)
}

// NewNamed is New with the namespace's name chosen by the caller.
func NewNamed(name string, subnet, n int) (*Net, error) {
	if n > 240 {
		return nil, fmt.Errorf("netns: %d addresses asked, at most 240", n)
	}
	p := &Net{Name: name, Prefix: fmt.Sprintf("10.213.%d.", subnet), host: fmt.Sprintf("kvxh%d", subnet)}
	peer := fmt.Sprintf("kvxp%d", subnet)
	exec.Command("ip", "netns", "del", p.Name).Run()
	exec.Command("ip", "link", "del", p.host).Run()
	if err := run("ip", "netns", "add", p.Name); err != nil {
		return nil, err
	}
	steps := [][]string{
		{"ip", "link", "add", p.host, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", p.Name},
		{"ip", "addr", "add", p.Prefix + "1/24", "dev", p.host},
		{"ip", "link", "set", p.host, "up"},
	}
	for i := range n {
		steps = append(steps, []string{"ip", "netns", "exec", p.Name, "ip", "addr", "add", p.Addr(i) + "/24", "dev", peer})
	}
	steps = append(steps,
		[]string{"ip", "netns", "exec", p.Name, "ip", "link", "set", peer, "up"},
		[]string{"ip", "netns", "exec", p.Name, "ip", "link", "set", "lo", "up"})
	for _, s := range steps {
		if err := run(s...); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// Close removes the namespace and the host's end of the veth pair.
func (p *Net) Close() {
	exec.Command("ip", "netns", "del", p.Name).Run()
	exec.Command("ip", "link", "del", p.host).Run()
}

// Addr is the namespace's address number i.
func (p *Net) Addr(i int) string { return fmt.Sprintf("%s%d", p.Prefix, 10+i) }

// Listen opens a TCP listener inside the namespace: the socket stays
// there after this thread returns to the host's namespace.
func (p *Net) Listen(addr string) (net.Listener, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(self)
	ns, err := unix.Open("/var/run/netns/"+p.Name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(ns)
	if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("entering %s: %w", p.Name, err)
	}
	lis, lerr := net.Listen("tcp", addr)
	if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
		// This thread must not go back to the pool in the wrong
		// namespace: leave it locked, so it exits with the goroutine.
		runtime.LockOSThread()
		if lis != nil {
			lis.Close()
		}
		return nil, fmt.Errorf("leaving %s: %w", p.Name, err)
	}
	if lerr != nil {
		return nil, lerr
	}
	return lis, nil
}

// AddLocalRange makes every address of the IPv4 prefix cidr (say
// "10.214.0.0/22") local to the namespace and routes the prefix there from
// the host, for fleets larger than New's 240 addresses: one listener on
// 0.0.0.0:PORT inside the namespace accepts connections to all of them,
// and each connection's LocalAddr is the address that was dialled. The
// host's route goes with the namespace's veth pair (Close).
func (p *Net) AddLocalRange(cidr string) error {
	steps := [][]string{
		{"ip", "netns", "exec", p.Name, "ip", "route", "replace", "local", cidr, "dev", "lo"},
		// Via the namespace's first address, so it needs one (New with
		// n ≥ 1). replace: a route left by a killed run is taken over.
		{"ip", "route", "replace", cidr, "via", p.Addr(0), "dev", p.host},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	return nil
}
