package e2e

import (
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// podNet is a network namespace holding pod-like addresses (the API
// server refuses loopback addresses in EndpointSlices): a veth pair joins
// it to the host, which reaches every address in it.
type podNet struct {
	name   string
	prefix string // "10.213.N."
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newPodNet creates the namespace with n addresses .10, .11, ... and
// removes it when the test ends.
func newPodNet(t *testing.T, subnet, n int) *podNet {
	t.Helper()
	p := &podNet{name: fmt.Sprintf("kvxds-e2e-%d", subnet), prefix: fmt.Sprintf("10.213.%d.", subnet)}
	host, peer := fmt.Sprintf("kvxh%d", subnet), fmt.Sprintf("kvxp%d", subnet)
	exec.Command("ip", "netns", "del", p.name).Run() // left over from a killed run
	exec.Command("ip", "link", "del", host).Run()
	run(t, "ip", "netns", "add", p.name)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", p.name).Run()
		exec.Command("ip", "link", "del", host).Run()
	})
	run(t, "ip", "link", "add", host, "type", "veth", "peer", "name", peer)
	run(t, "ip", "link", "set", peer, "netns", p.name)
	run(t, "ip", "addr", "add", p.prefix+"1/24", "dev", host)
	run(t, "ip", "link", "set", host, "up")
	for i := range n {
		run(t, "ip", "netns", "exec", p.name, "ip", "addr", "add", p.addr(i)+"/24", "dev", peer)
	}
	run(t, "ip", "netns", "exec", p.name, "ip", "link", "set", peer, "up")
	run(t, "ip", "netns", "exec", p.name, "ip", "link", "set", "lo", "up")
	return p
}

func (p *podNet) addr(i int) string { return fmt.Sprintf("%s%d", p.prefix, 10+i) }

// listen opens a TCP listener inside the namespace: the socket stays
// there after this thread returns to the host's namespace.
func (p *podNet) listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(self)
	ns, err := unix.Open("/var/run/netns/"+p.name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ns)
	if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	lis, lerr := net.Listen("tcp", addr)
	if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
		// This thread must not go back to the pool in the wrong
		// namespace: leave it locked, so it exits with the goroutine.
		runtime.LockOSThread()
		t.Fatal(err)
	}
	if lerr != nil {
		t.Fatal(lerr)
	}
	return lis
}
