package natsclient_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// broker runs a nats-server on the deployment's own configuration
// (deploy/nats) and returns the URL of account TEAM_A's engine user, for
// the hosts, and a way to connect as its least-privilege caller, for the
// clients: every suite over NATS thus shows that the documented
// permissions are enough for every feature of the facades.
func broker(t *testing.T) (engineURL string, caller func(t *testing.T) *nats.Conn) {
	t.Helper()
	d := natstest.StartDeployed(t)
	return d.URL("engine_a"), func(t *testing.T) *nats.Conn { return d.Connect(t, "caller_a") }
}

// serve runs the services on a broker of their own, behind a real host, and
// returns a way to open clients on it: each subtest of a contract suite
// gets its own broker, since every host joins the same queue groups.
func serve(t *testing.T, services ...natsapi.Service) func(t *testing.T) *natsclient.Client {
	t.Helper()
	url, caller := broker(t)
	host, err := natsapi.NewHost(natsapi.Options{
		Owner:   domain.NewInstanceID(),
		Connect: func() (*nats.Conn, error) { return nats.Connect(url) },
		Replies: natstest.Connect(t, url),
	}, services...)
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Stop)
	return func(t *testing.T) *natsclient.Client { return natsclient.New(caller(t)) }
}
