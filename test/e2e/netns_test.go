package e2e

import (
	"fmt"
	"net"
	"testing"

	"github.com/kvxds/kvxds/test/netns"
)

// podNet is a network namespace holding pod-like addresses for a test.
type podNet struct{ *netns.Net }

// newPodNet creates the namespace with n addresses .10, .11, ... and
// removes it when the test ends.
func newPodNet(t *testing.T, subnet, n int) *podNet {
	t.Helper()
	p, err := netns.NewNamed(fmt.Sprintf("kvxds-e2e-%d", subnet), subnet, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return &podNet{p}
}

func (p *podNet) addr(i int) string { return p.Addr(i) }

func (p *podNet) listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	lis, err := p.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	return lis
}
