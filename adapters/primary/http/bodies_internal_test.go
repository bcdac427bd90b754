package httpapi

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/quota"
)

// A body read whole allocates little more than twice its length, its
// chunks and their joined copy, and once read holds its exact length of
// the budget. Its buffer used to grow by copying, a quarter at a time:
// an 8 MiB body allocated some 43 MiB, and a body of no declared length
// held what its last buffer had room for.
func TestABodyReadWholeAllocatesAtMostTwiceItsLengthAndHoldsItExactly(t *testing.T) {
	a := &api{
		maxBody: DefaultMaxBody, bodies: quota.New(DefaultBodyBudget, DefaultBodyBudget/DefaultBodyShareDivisor),
		bodyStall: DefaultBodyStall, minRate: DefaultMinTransferRate,
	}
	for _, tc := range []struct {
		name     string
		size     int
		declared bool
	}{
		{"Declared8MiB", DefaultMaxBody, true},
		{"Chunked8MiB", DefaultMaxBody, false},
		{"ChunkedPastAChunk", bodyChunk + 1, false},
		{"DeclaredPastAChunk", bodyChunk + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := bytes.Repeat([]byte("a"), tc.size)
			// What the process allocates counts every goroutine's
			// allocations. The package's parallel tests wait while this
			// one runs, but a goroutine an earlier test left can still
			// allocate; it can only add to a read's count,
			// never take from it: the least of several reads is the
			// nearest to the read's own, and a stray allocation would
			// have to fall inside every one of them to fail the test.
			// The old growth by copying allocated over twice the bound in
			// every read, so the least of them fails as surely.
			least := uint64(math.MaxUint64)
			for range 5 {
				r := httptest.NewRequest("PUT", "/v1/kv/a", bytes.NewReader(data))
				r.ContentLength = -1
				if tc.declared {
					r.ContentLength = int64(tc.size)
				}
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				got, release, err := a.readBody(deadlines{httptest.NewRecorder()}, r)
				runtime.ReadMemStats(&after)
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("read %d bytes of %d: %v", len(got), tc.size, err)
				}
				least = min(least, after.TotalAlloc-before.TotalAlloc)
				if held := a.bodies.Held(); held != int64(tc.size) {
					t.Fatalf("a body of %d bytes, read, holds %d of the budget", tc.size, held)
				}
				release()
				if held := a.bodies.Held(); held != 0 {
					t.Fatalf("a body released still holds %d of the budget", held)
				}
			}
			// The slack is the request's reader and what the runtime
			// allocates meanwhile.
			if least > uint64(2*tc.size+1<<20) {
				t.Errorf("reading a body of %d bytes allocated %d at the least of 5 reads, over twice its length", tc.size, least)
			}
		})
	}
}

// What reading a body whole costs, of the most and of 1 KiB, declared
// (Content-Length) and not (chunked): run with -benchmem.
func BenchmarkReadBody(b *testing.B) {
	for _, bc := range []struct {
		name     string
		size     int
		declared bool
	}{
		{"Declared8MiB", DefaultMaxBody, true},
		{"Declared1KiB", 1 << 10, true},
		{"Chunked8MiB", DefaultMaxBody, false},
		{"Chunked1KiB", 1 << 10, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a := &api{
				maxBody: DefaultMaxBody, bodies: quota.New(DefaultBodyBudget, DefaultBodyBudget/DefaultBodyShareDivisor),
				bodyStall: DefaultBodyStall, minRate: DefaultMinTransferRate,
			}
			data := bytes.Repeat([]byte("b"), bc.size)
			body := bytes.NewReader(data)
			r := httptest.NewRequest("PUT", "/v1/kv/bench", nil)
			r.Body = io.NopCloser(body)
			w := deadlines{httptest.NewRecorder()}
			b.SetBytes(int64(bc.size))
			for b.Loop() {
				body.Reset(data)
				r.ContentLength = -1
				if bc.declared {
					r.ContentLength = int64(bc.size)
				}
				got, release, err := a.readBody(w, r)
				if err != nil || len(got) != bc.size {
					b.Fatalf("read %d bytes of %d: %v", len(got), bc.size, err)
				}
				release()
			}
		})
	}
}

// deadlines is a response writer that takes read deadlines, as the
// server's does: a recorder refuses them, and each refusal allocates.
type deadlines struct{ *httptest.ResponseRecorder }

func (deadlines) SetReadDeadline(time.Time) error { return nil }

// A panic while a body is read, or while it is decoded, gives back what
// the body had reserved. The server recovers a handler's panic and serves
// on, so a reservation kept there was held for good, and each such panic
// took that much of the budget from every later body.
func TestABodyWhosePanicEndsItsReadingGivesBackItsReservation(t *testing.T) {
	readBody := func(a *api, r *http.Request) { _, _, _ = a.readBody(deadlines{httptest.NewRecorder()}, r) }
	for _, tc := range []struct {
		name string
		// length is the body's Content-Length, -1 for none; sent is
		// how many bytes arrive before the panic, in the body's read
		// or, with none, in its decoding.
		length int64
		sent   int
		read   func(a *api, r *http.Request)
	}{
		{"DeclaredInAChunk", 100, 99, readBody},
		{"DeclaredPastAChunk", 3 * bodyChunk, bodyChunk + 1, readBody},
		{"Chunked", -1, bodyChunk + 1, readBody},
		{"InItsDecoding", 2, 0, func(a *api, r *http.Request) {
			_, _ = a.decode(deadlines{httptest.NewRecorder()}, r, &panicky{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &api{
				maxBody: DefaultMaxBody, bodies: quota.New(DefaultBodyBudget, DefaultBodyBudget/DefaultBodyShareDivisor),
				bodyStall: DefaultBodyStall, minRate: DefaultMinTransferRate,
			}
			body := io.MultiReader(bytes.NewReader(make([]byte, tc.sent)), panicReader{})
			if tc.sent == 0 {
				body = bytes.NewReader([]byte("{}"))
			}
			r := httptest.NewRequest("PUT", "/v1/kv/a", nil)
			r.Body, r.ContentLength = io.NopCloser(body), tc.length
			func() {
				defer func() {
					if recover() == nil {
						t.Fatal("the body's reading did not panic")
					}
				}()
				tc.read(a, r)
			}()
			if held := a.bodies.Held(); held != 0 {
				t.Fatalf("a body whose reading panicked still holds %d bytes of the budget", held)
			}
		})
	}
}

// panicReader panics when read, as a broken body reader would.
type panicReader struct{}

func (panicReader) Read([]byte) (int, error) { panic("the body's reader broke") }

// panicky panics when decoded into, as a broken decoder would.
type panicky struct{}

func (*panicky) UnmarshalJSON([]byte) error { panic("the body's decoder broke") }
