package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
)

// put starts a PUT of an object whose body comes from body, and returns
// its status (0 when the request failed) once it ends.
func (a *api) put(key string, body io.Reader) <-chan int {
	done := make(chan int, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "PUT", a.url+"/v1/objects/"+key, body)
		if err != nil {
			done <- 0
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		done <- resp.StatusCode
	}()
	return done
}

// A client that stalls an upload holds its transfer slot only for the
// stall time; meanwhile another transfer is refused 503 at once and every
// other route is served.
func TestAStalledUploadHoldsItsSlotOnlyForTheStallTime(t *testing.T) {
	a := serveAPI(t, memoryServices(t), httpapi.Options{MaxTransfers: 1, TransferStall: 500 * time.Millisecond})
	stalled, stall := io.Pipe()
	t.Cleanup(func() { _ = stall.Close() })
	slow := a.put("slow", stalled)
	if _, err := stall.Write([]byte("a first byte")); err != nil {
		t.Fatal(err)
	}
	open := map[string]string{"via": httpapi.ViaHTTP}
	waitUntil(t, func() bool { return metric(t, a.metrics, "abi_engine_sessions_open", open) == 1 })
	resp, _ := a.expect(http.StatusServiceUnavailable, "PUT", "/v1/objects/other", "x")
	if resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a 503 for a full API has no Retry-After")
	}
	a.expect(http.StatusNoContent, "PUT", "/v1/kv/bystander", "v")
	a.expect(http.StatusOK, "GET", "/v1/kv/bystander", "")
	select {
	case code := <-slow:
		if code == http.StatusOK {
			t.Fatalf("a stalled upload was stored")
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("a stalled upload still holds its slot after 20s")
	}
	a.expect(http.StatusOK, "PUT", "/v1/objects/other", "x")
	a.expect(http.StatusNotFound, "GET", "/v1/objects/slow", "")
}

// trickle sends n chunks of size bytes, one every gap.
func trickle(w *io.PipeWriter, n, size int, gap time.Duration) {
	chunk := bytes.Repeat([]byte("x"), size)
	for range n {
		if _, err := w.Write(chunk); err != nil {
			return
		}
		time.Sleep(gap)
	}
	_ = w.Close()
}

// An upload that lasts many times the stall time is taken while its
// client keeps up the minimum rate; one that sends steadily but below it
// is cut off with 408.
func TestAnUploadMustKeepUpTheMinimumRateNotATotalTime(t *testing.T) {
	a := serveAPI(t, memoryServices(t), httpapi.Options{TransferStall: time.Second, MinTransferRate: 64 << 10})

	r, w := io.Pipe()
	go trickle(w, 100, 16<<10, 30*time.Millisecond) // about 0.5 MB/s for 3 s
	if code := <-a.put("steady", r); code != http.StatusOK {
		t.Fatalf("an upload above the minimum rate for 3 stall times answered %d", code)
	}
	_, got := a.expect(http.StatusOK, "GET", "/v1/objects/steady", "")
	if len(got) != 100*16<<10 {
		t.Fatalf("the steady upload stored %d bytes, want %d", len(got), 100*16<<10)
	}

	r, w = io.Pipe()
	t.Cleanup(func() { _ = w.Close() })
	go trickle(w, 1000, 100, 20*time.Millisecond) // 5 KB/s, never stalling
	if code := <-a.put("crawl", r); code != http.StatusRequestTimeout && code != 0 {
		t.Fatalf("an upload below the minimum rate answered %d, want 408 or a cut connection", code)
	}
	a.expect(http.StatusNotFound, "GET", "/v1/objects/crawl", "")
}

// A download to a client that stops reading is cut off after the stall
// time, freeing its slot; one read at a good pace completes.
func TestADownloadToAClientThatStopsReadingIsCutOff(t *testing.T) {
	a := serveAPI(t, memoryServices(t), httpapi.Options{MaxTransfers: 1, TransferStall: 2 * time.Second})
	big := strings.Repeat("y", 32<<20) // more than the socket buffers hold
	a.expect(http.StatusOK, "PUT", "/v1/objects/big", big)

	req, err := http.NewRequestWithContext(t.Context(), "GET", a.url+"/v1/objects/big", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	// The client reads nothing: once the stall time passes, the slot is
	// free again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, _ := a.do("PUT", "/v1/objects/after", strings.NewReader("x"))
		if r.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a download nobody reads still holds the only slot after 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, got := a.expect(http.StatusOK, "GET", "/v1/objects/big", ""); len(got) != len(big) {
		t.Fatalf("a download read at pace gave %d bytes, want %d", len(got), len(big))
	}
}

// waitUntil polls cond until it holds, for at most 20 s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met in 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An upload that keeps to every bound of the API (a read waits at most
// the stall time, and the average rate stays above the least once the
// stall time has passed) is not closed under it by the engine, whose
// transfer closes after its idle time without a call. The facade called
// the engine only once it had a whole chunk (256 KiB) of the body, so a
// client that sent fast and then slowly, each read well within the stall
// time, had its transfer closed and its PUT failed; it now sends what it
// has after its upload flush time. Here at scale: a transfer idle of 2 s,
// a stall of 1 s and a flush of 0.5 s, the defaults' ratios.
func TestAnUploadWithinTheAPIsBoundsOutlivesTheEnginesTransferIdle(t *testing.T) {
	idle := 2 * time.Second
	flush := idle / (natsapi.DefaultTransferIdle / natsclient.DefaultUploadFlush)
	_, services := kernelWith(t, nil, natsapi.TransferOptions{Idle: idle}, natsclient.WithUploadFlush(flush))
	a := serveAPI(t, services, httpapi.Options{TransferStall: idle / 2, MinTransferRate: 8 << 10})

	r, w := io.Pipe()
	t.Cleanup(func() { _ = w.Close() })
	const fast = 300 << 10
	go func() {
		if _, err := w.Write(make([]byte, fast)); err != nil {
			return
		}
		// 300 KiB is 37 s of the least rate: the client may now send
		// slowly, a byte each 0.8 s of the 1 s stall, for twice the
		// engine's idle time. This is the slow client, not a wait.
		for range 5 {
			time.Sleep(2 * idle / 5)
			if _, err := w.Write([]byte{1}); err != nil {
				return
			}
		}
		_, _ = w.Write(make([]byte, fast))
		_ = w.Close()
	}()
	if code := <-a.put("bursty", r); code != http.StatusOK {
		t.Fatalf("an upload that kept to the API's stall time and least rate answered %d", code)
	}
	if _, got := a.expect(http.StatusOK, "GET", "/v1/objects/bursty", ""); len(got) != 2*fast+5 {
		t.Fatalf("stored %d bytes, want %d", len(got), 2*fast+5)
	}
}

// A HEAD of an object moves no bytes and takes no transfer slot: it is
// answered while every slot is held. It went through the GET route's
// slots and was refused 503 while the transfers were busy, although it
// only looks the object up.
func TestAHeadIsAnsweredWhileEveryTransferSlotIsHeld(t *testing.T) {
	a := serveAPI(t, memoryServices(t), httpapi.Options{MaxTransfers: 1, TransferStall: 20 * time.Second})
	a.expect(http.StatusOK, "PUT", "/v1/objects/there", "x")
	stalled, stall := io.Pipe()
	t.Cleanup(func() { _ = stall.Close() })
	a.put("slow", stalled)
	if _, err := stall.Write([]byte("a first byte")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		return metric(t, a.metrics, "abi_engine_sessions_open", map[string]string{"via": httpapi.ViaHTTP}) == 1
	})
	a.expect(http.StatusServiceUnavailable, "GET", "/v1/objects/there", "")
	if resp, _ := a.expect(http.StatusOK, "HEAD", "/v1/objects/there", ""); resp.Header.Get("Content-Length") != "1" {
		t.Fatalf("the HEAD answered Content-Length %q, want 1", resp.Header.Get("Content-Length"))
	}
}

// One client runs at most its share of the API's object transfers: its
// transfers past it are refused 503 at once, naming the share, and
// another client's transfer is served meanwhile. A client keeping its
// uploads at the minimum rate held every slot for as long as it liked, and
// every other client's GET and PUT of an object was refused.
func TestOneClientRunsOnlyItsShareOfTheTransfers(t *testing.T) {
	const slots, share = httpapi.DefaultMaxTransfers, httpapi.DefaultMaxTransfers / 4
	metrics := httpapi.NewMetrics()
	url := serveReal(t, memoryServices(t), httpapi.Options{Metrics: metrics, TransferStall: time.Minute})
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	greedy := clientFrom("127.0.3.1")
	answers := make(chan answer, slots)
	for i := range slots {
		got := send(greedy, fmt.Sprintf("%s/v1/objects/greedy-%d", url, i), &heldBody{data: []byte("held"), release: release}, -1)
		go func() { answers <- <-got }()
	}
	var refused []answer
	open := map[string]string{"via": httpapi.ViaHTTP}
	waitUntil(t, func() bool {
		select {
		case a := <-answers:
			refused = append(refused, a)
		default:
		}
		return len(refused)+int(metric(t, metrics, "abi_engine_sessions_open", open)) == slots
	})
	if len(refused) != slots-share {
		t.Fatalf("a client starting %d transfers had %d refused, want %d past its share of %d", slots, len(refused), slots-share, share)
	}
	for _, a := range refused {
		if a.code != http.StatusServiceUnavailable || a.retryAfter == "" || !strings.Contains(a.body, "share") {
			t.Fatalf("a transfer past the client's share got %d (Retry-After %q): %s", a.code, a.retryAfter, a.body)
		}
	}

	bystander := clientFrom("127.0.3.2")
	if a := <-send(bystander, url+"/v1/objects/bystander", strings.NewReader("mine"), 4); a.code != http.StatusOK {
		t.Fatalf("a bystander's object PUT, while another client ran its share of the transfers, answered %d: %s", a.code, a.body)
	}
	close(release)
	for range share {
		if a := <-answers; a.code != http.StatusOK {
			t.Fatalf("a transfer within the client's share answered %d: %s", a.code, a.body)
		}
	}
}
