package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	"github.com/abi-engine/engine/domain"
)

func TestMetricsCountCallsByServiceOperationAndCode(t *testing.T) {
	a := serveAPI(t, memoryServices(t), httpapi.Options{})
	a.expect(http.StatusNoContent, "PUT", "/v1/kv/k", "v")
	a.expect(http.StatusOK, "GET", "/v1/kv/k", "")
	a.expect(http.StatusOK, "GET", "/v1/kv/k", "")
	a.expect(http.StatusNotFound, "GET", "/v1/kv/absent", "")
	a.expect(http.StatusNotImplemented, "GET", "/v1/documents/c/d", "")
	for _, c := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"via": "http", "service": "keyvalue", "operation": "set", "code": "204"}, 1},
		{map[string]string{"via": "http", "service": "keyvalue", "operation": "get", "code": "200"}, 2},
		{map[string]string{"via": "http", "service": "keyvalue", "operation": "get", "code": "404"}, 1},
		{map[string]string{"via": "http", "service": "document", "operation": "get", "code": "501"}, 1},
	} {
		if got := metric(t, a.metrics, "abi_engine_calls_total", c.labels); got != c.want {
			t.Errorf("abi_engine_calls_total%v = %v, want %v", c.labels, got, c.want)
		}
	}
	if got := metric(t, a.metrics, "abi_engine_call_duration_seconds", map[string]string{"via": "http", "service": "keyvalue", "operation": "get"}); got != 3 {
		t.Errorf("the get latency histogram has %v samples, want 3", got)
	}
	_, text := a.expect(http.StatusOK, "GET", "/metrics", "")
	for _, want := range []string{
		`abi_engine_calls_total{code="404",operation="get",service="keyvalue",via="http"} 1`,
		`abi_engine_call_duration_seconds_bucket{operation="get",service="keyvalue",via="http",le="+Inf"} 3`,
		"go_goroutines ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestMetricsFollowTheLease(t *testing.T) {
	m := httpapi.NewMetrics()
	old := domain.Holder{InstanceID: domain.NewInstanceID()}
	for _, tr := range []domain.Transition{
		{From: domain.StateIdle, To: domain.StateStandby},
		{From: domain.StateStandby, To: domain.StateServing, Previous: old},
		{From: domain.StateServing, To: domain.StateFenced},
		{From: domain.StateFenced, To: domain.StateServing},
	} {
		m.Observe(tr)
	}
	state := func(s string) float64 {
		return metric(t, m, "abi_engine_lease_state", map[string]string{"state": s})
	}
	if state("serving") != 1 || state("fenced") != 0 || state("standby") != 0 {
		t.Fatalf("lease state: serving %v, fenced %v, standby %v", state("serving"), state("fenced"), state("standby"))
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"abi_engine_lease_fencings_total", nil, 1},
		{"abi_engine_lease_handovers_total", nil, 1},
		{"abi_engine_standby_wait_seconds", nil, 1},
		{"abi_engine_lease_transitions_total", map[string]string{"from": "fenced", "to": "serving"}, 1},
		{"abi_engine_lease_transitions_total", map[string]string{"from": "serving", "to": "fenced"}, 1},
	} {
		if got := metric(t, m, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	m.Observe(domain.Transition{From: domain.StateServing, To: domain.StateReleased})
	if state("serving") != 0 || state("released") != 1 {
		t.Fatalf("after release: serving %v, released %v", state("serving"), state("released"))
	}
}

// Every kernel call on NATS is counted here, so its cost is part of every
// call's (go test -bench CallMetrics ./adapters/primary/http/).
func BenchmarkCallMetrics(b *testing.B) {
	m := httpapi.NewMetrics()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Call("nats", "keyvalue", "get", http.StatusOK, time.Microsecond)
		}
	})
}
