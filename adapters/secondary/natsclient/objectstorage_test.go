package natsclient_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// engine is one serving engine on a broker: a host with its transfer and
// overflow hosts, all owned by one instance id.
type engine struct {
	owner     string
	host      *natsapi.Host
	transfers *natsapi.TransferHost
	overflow  *natsapi.OverflowHost
}

// serveEngine runs an engine on the broker at url, serving the services
// services makes (given its transfer host), and stops it when the test ends.
func serveEngine(t testing.TB, url string, services func(*natsapi.TransferHost) []natsapi.Service) *engine {
	return serveEngineWith(t, url, natsapi.TransferOptions{}, services)
}

// serveEngineWith is serveEngine with transfers set by transfer, whose
// Owner and Conn it fills in.
func serveEngineWith(t testing.TB, url string, transfer natsapi.TransferOptions, services func(*natsapi.TransferHost) []natsapi.Service) *engine {
	t.Helper()
	e := &engine{owner: domain.NewInstanceID()}
	session := natstest.Connect(t, url)
	transfer.Owner, transfer.Conn = e.owner, session
	var err error
	if e.transfers, err = natsapi.NewTransferHost(transfer); err != nil {
		t.Fatal(err)
	}
	if e.overflow, err = natsapi.NewOverflowHost(natsapi.OverflowOptions{Owner: e.owner, Conn: session}); err != nil {
		t.Fatal(err)
	}
	e.host, err = natsapi.NewHost(natsapi.Options{
		Owner:    e.owner,
		Connect:  func() (*nats.Conn, error) { return nats.Connect(url) },
		Replies:  session,
		Overflow: e.overflow,
	}, services(e.transfers)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, serve := range []func() error{e.transfers.Serve, e.overflow.Serve, e.host.Serve} {
		if err := serve(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		e.host.Stop()
		e.transfers.Stop()
		e.overflow.Stop()
	})
	return e
}

// The facade passes the same contract as a local store, objects streamed
// through transfers: facade, broker, endpoints, memory adapter.
func TestObjectStorageContract(t *testing.T) {
	t.Run("nats", func(t *testing.T) {
		contracttests.RunObjectStorage(t, contracttests.HarnessFunc[ports.ObjectStorage](func(t *testing.T) func(*testing.T) ports.ObjectStorage {
			store, err := memory.Open(t.Context(), memory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			url, caller := broker(t)
			serveEngine(t, url, func(tr *natsapi.TransferHost) []natsapi.Service {
				return []natsapi.Service{natsapi.ObjectStorage(store, tr)}
			})
			return func(t *testing.T) ports.ObjectStorage {
				return natsclient.NewObjectStorage(natsclient.New(caller(t)))
			}
		}), contracttests.ObjectStorageCapabilities{ConditionalPut: true, PathLikeKeys: true, NestedKeys: true, Linearizable: true})
	})
}
