package natstest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// DeployDir is the repository's deploy/nats directory: the nats-server
// configuration with its accounts, users and permissions that operators
// are given, which the tests load as it is.
func DeployDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "nats")
}

// The deployed users, by account: an engine, a caller and an operator each.
var (
	DeployedAccounts = []string{"TEAM_A", "TEAM_B"}
	deployedUsers    = map[string][]string{
		"TEAM_A": {"engine_a", "caller_a", "ops_a"},
		"TEAM_B": {"engine_b", "caller_b", "ops_b"},
	}
)

// Password is the test password of a deployed user: the configuration
// reads passwords from the environment, as TEAM_A_ENGINE_PASSWORD.
func Password(user string) string { return "test-password-" + user }

// passwordVar is the variable the configuration reads user's password from.
func passwordVar(account, user string) string {
	role, _, _ := strings.Cut(user, "_")
	return fmt.Sprintf("%s_%s_PASSWORD", account, strings.ToUpper(role))
}

var setPasswords sync.Once

// DeployedOptions are the deployed configuration's server options, ready
// for a test: on a loopback port of its own with its own store. The
// passwords are set in the process environment once, to fixed values, so
// tests that run in parallel read the same ones.
func DeployedOptions(tb testing.TB, conf string) *server.Options {
	tb.Helper()
	setPasswords.Do(func() {
		for account, users := range deployedUsers {
			for _, u := range users {
				_ = os.Setenv(passwordVar(account, u), Password(u))
			}
		}
	})
	opts, err := server.ProcessConfigFile(filepath.Join(DeployDir(), conf))
	if err != nil {
		tb.Fatalf("deploy/nats/%s: %v", conf, err)
	}
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.StoreDir = tb.TempDir()
	opts.NoLog, opts.NoSigs = true, true
	return opts
}

// StartWith runs a server on opts and stops it when the test ends.
func StartWith(tb testing.TB, opts *server.Options) *server.Server {
	tb.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		tb.Fatalf("nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		tb.Fatalf("nats-server not ready in 10s")
	}
	tb.Cleanup(s.Shutdown)
	return s
}

// Deployed is a server on deploy/nats/server.conf.
type Deployed struct{ Server *server.Server }

// StartDeployed runs a server on the deployed configuration.
func StartDeployed(tb testing.TB) *Deployed {
	tb.Helper()
	return &Deployed{Server: StartWith(tb, DeployedOptions(tb, "server.conf"))}
}

// URL is the server's URL with user's name and password in it.
func (d *Deployed) URL(user string) string {
	return strings.Replace(d.Server.ClientURL(), "nats://", "nats://"+user+":"+Password(user)+"@", 1)
}

// InboxPrefix is the inbox prefix a caller user is confined to.
func InboxPrefix(user string) string { return "_INBOX." + user }

// Options are what a client needs to connect as user: its password, and a
// caller's inbox prefix.
func (d *Deployed) Options(user string) []nats.Option {
	opts := []nats.Option{nats.UserInfo(user, Password(user))}
	if strings.HasPrefix(user, "caller_") {
		opts = append(opts, nats.CustomInboxPrefix(InboxPrefix(user)))
	}
	return opts
}

// Connect connects as user, for the length of the test.
func (d *Deployed) Connect(tb testing.TB, user string) *nats.Conn {
	tb.Helper()
	return Connect(tb, d.Server.ClientURL(), d.Options(user)...)
}
