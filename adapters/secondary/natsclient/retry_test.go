package natsclient_test

import (
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/natsclient"
)

func TestRetryable(t *testing.T) {
	owner := "0123456789abcdef0123456789abcdef"
	cases := map[string]bool{
		"abi.svc.keyvalue.v1.get":                             true,
		"abi.svc.object_storage.v1.transfer.open":             true,
		"abi.discovery.default.v1.list":                       true,
		"abi.discovery.default.v1.presence":                   false,
		"abi.svc.object_storage.v1." + owner + ".read":        false,
		"abi.svc.model_registry.v1." + owner + ".stream_next": false,
		"abi.rpc.overflow." + owner + ".read":                 false,
		"abi.agent.x.v1.chat":                                 false,
		"_INBOX.abc":                                          false,
		"abi.svc.keyvalue.v2.get":                             false,
	}
	for subject, want := range cases {
		if got := natsclient.Retryable(subject); got != want {
			t.Errorf("Retryable(%q) = %v, want %v", subject, got, want)
		}
	}
}
