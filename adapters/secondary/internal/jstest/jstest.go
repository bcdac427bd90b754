// Package jstest gives the JetStream adapters' tests their brokers and
// per-test bucket names.
package jstest

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/abi-engine/engine/internal/natstest"
)

// Run runs suite as subtest "jetstream" on one node with buckets of one
// replica, and as "jetstream-r3" on a three-node cluster with buckets of
// three. url reaches every node of the broker.
func Run(t *testing.T, suite func(t *testing.T, url string, replicas int)) {
	t.Run("jetstream", func(t *testing.T) {
		suite(t, natstest.StartServer(t).ClientURL(), 1)
	})
	t.Run("jetstream-r3", func(t *testing.T) {
		suite(t, natstest.URLs(natstest.StartCluster(t)...), 3)
	})
}

var buckets atomic.Int64

// Bucket is a bucket name of the test's own.
func Bucket(t *testing.T) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, t.Name())
	if len(name) > 100 {
		name = name[len(name)-100:]
	}
	return fmt.Sprintf("T%d_%s", buckets.Add(1), name)
}
