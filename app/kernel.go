package app

import (
	"context"
	"sync"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
)

// kernel is what a serving engine answers on NATS: the kernel services'
// endpoints, and the sessions they open (object transfers, overflow
// replies), all owned by the engine's instance id.
type kernel struct {
	host      *natsapi.Host
	transfers *natsapi.TransferHost
	overflow  *natsapi.OverflowHost
}

// serve subscribes the owner subjects, then the queue groups, so a session
// can be reached as soon as a call can open one.
func (k *kernel) serve() error {
	for _, serve := range []func() error{k.transfers.Serve, k.overflow.Serve, k.host.Serve} {
		if err := serve(); err != nil {
			return err
		}
	}
	return nil
}

// fence stops everything at once: admission, the calls running and every
// session, whose stores' calls are cancelled. A fenced engine is often cut
// off from its broker, so nothing here waits on it; the wait returned
// ends, within a bound, what needs the broker. Before, the sessions closed
// only after the accepting connection's drain and a flush had timed out
// (2 s and 10 s), and a successor could serve while an upload still wrote.
func (k *kernel) fence() (wait func()) {
	waits := []func(){k.host.Fence(), k.transfers.Fence(), k.overflow.Fence()}
	return func() {
		var wg sync.WaitGroup
		for _, w := range waits {
			wg.Go(w)
		}
		wg.Wait()
	}
}

// drain stops accepting calls, lets those received and the sessions open
// finish within ctx, then stops what is left. It reports whether all
// finished in time.
func (k *kernel) drain(ctx context.Context) (bool, error) {
	return natsapi.Drain(ctx, k.host, k.transfers, k.overflow)
}

// kernelStopLimit is the longest stop takes: it stops the three hosts one
// after another, each within natsapi.StopLimit.
const kernelStopLimit = 3 * natsapi.StopLimit

func (k *kernel) stop() {
	k.host.Stop()
	k.transfers.Stop()
	k.overflow.Stop()
}

// mayServe is admit without the token, for the overflow host, whose
// sessions call no store.
func mayServe(admit func() (uint64, bool)) func() bool {
	return func() bool {
		_, ok := admit()
		return ok
	}
}

// newKernel builds the session hosts and the endpoint host around them.
func newKernel(opts natsapi.Options, services func(*natsapi.TransferHost) []natsapi.Service) (*kernel, error) {
	transfers, err := natsapi.NewTransferHost(natsapi.TransferOptions{
		Owner: opts.Owner, Conn: opts.Replies, CallerSecret: opts.CallerSecret, Logger: opts.Logger, Admit: opts.Admit,
	})
	if err != nil {
		return nil, err
	}
	overflow, err := natsapi.NewOverflowHost(natsapi.OverflowOptions{
		Owner: opts.Owner, Conn: opts.Replies, CallerSecret: opts.CallerSecret, Logger: opts.Logger, MayServe: mayServe(opts.Admit),
	})
	if err != nil {
		return nil, err
	}
	opts.Overflow = overflow
	host, err := natsapi.NewHost(opts, services(transfers)...)
	if err != nil {
		return nil, err
	}
	return &kernel{host: host, transfers: transfers, overflow: overflow}, nil
}
