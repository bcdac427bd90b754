// Package natsserver runs a nats-server with JetStream inside the engine's
// process, for a single engine on a machine with no broker of its own.
package natsserver

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Answers reports whether a NATS server answers at url within timeout.
func Answers(url string, timeout time.Duration) bool {
	nc, err := nats.Connect(url, nats.Timeout(timeout), nats.NoReconnect(), nats.Name("abi-engine probe"))
	if err != nil {
		return false
	}
	nc.Close()
	return true
}

// Start runs a server on hostport with its JetStream data under dataDir and
// returns once it takes connections.
func Start(hostport, dataDir string) (*server.Server, error) {
	host, portText, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server address %q: %w", hostport, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server port %q: %w", portText, err)
	}
	s, err := server.NewServer(&server.Options{
		ServerName: "abi-engine-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   filepath.Join(dataDir, "nats"),
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server on %s did not start in 10s (is the port taken?)", hostport)
	}
	return s, nil
}
