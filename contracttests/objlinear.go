package contracttests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// objLinearInput is one call on the raced object: a get, a stat, a
// delete, or a put of content unique to the call, plain, if absent, or
// if the stored ETag is ifMatch.
type objLinearInput struct {
	op       string // "get", "stat", "put" or "delete"
	content  string
	ifAbsent bool
	ifMatch  string
}

// objLinearOutput is a call's answer: the object read or written, or a
// refusal.
type objLinearOutput struct {
	found    bool
	content  string // get only
	etag     string
	size     int64
	conflict bool
	notFound bool
}

// objLinearState is the object as a sequence of calls leaves it.
type objLinearState struct {
	present bool
	content string
	etag    string
}

// objLinearModel is the object store's promise for one key, as a
// sequential specification. ETags are the store's to choose, but a put of
// other content must change it, and report the one later reads see.
// Every size must be the content's.
var objLinearModel = linearModel(
	func(s objLinearState, in objLinearInput, out objLinearOutput) (bool, objLinearState) {
		switch in.op {
		case "get", "stat":
			if !s.present {
				return out.notFound, s
			}
			return out.found && out.etag == s.etag && out.size == int64(len(s.content)) &&
				(in.op == "stat" || out.content == s.content), s
		case "put":
			// No call asks for both conditions: the port refuses that.
			if in.ifAbsent && s.present || in.ifMatch != "" && (!s.present || s.etag != in.ifMatch) {
				return out.conflict, s
			}
			fresh := !s.present || in.content == s.content || out.etag != s.etag
			return out.found && out.etag != "" && fresh && out.size == int64(len(in.content)),
				objLinearState{present: true, content: in.content, etag: out.etag}
		case "delete":
			return out.notFound == !s.present && !out.conflict, objLinearState{}
		}
		return false, s
	},
	func(in objLinearInput, out objLinearOutput) string {
		call := in.op + "()"
		switch {
		case in.op == "put" && in.ifAbsent:
			call = fmt.Sprintf("put(%s, if absent)", in.content)
		case in.op == "put" && in.ifMatch != "":
			call = fmt.Sprintf("put(%s, if %s)", in.content, in.ifMatch)
		case in.op == "put":
			call = fmt.Sprintf("put(%s)", in.content)
		}
		switch {
		case out.conflict:
			return call + " -> conflict"
		case out.notFound:
			return call + " -> not found"
		case in.op == "get":
			return fmt.Sprintf("%s -> %s %s", call, out.etag, out.content)
		case in.op == "put" || in.op == "stat":
			return fmt.Sprintf("%s -> %s", call, out.etag)
		}
		return call + " -> ok"
	},
)

// objWritesAreLinearizable races callers on two handles over one object:
// plain puts, deletes, gets and stats, and, where the adapter has
// ConditionalPut, puts if absent and puts at the ETag each caller last
// saw. Each answer must be one the object could give at a single moment
// within its call.
func objWritesAreLinearizable(t *testing.T, open func(t *testing.T) ports.ObjectStorage, caps ObjectStorageCapabilities) {
	if !caps.Linearizable {
		t.Skipf("%s: no Linearizable", objAdapterName(t))
	}
	handles := []ports.ObjectStorage{open(t), open(t)}
	checkLinearizable(t, "Put, Get, Stat and Delete racing on one object", objLinearModel, handles, func(w int, s ports.ObjectStorage, rng *rand.Rand) linearCaller {
		var etag string // the ETag this caller last saw; "" for none
		return func(ctx context.Context, i int) (any, any, error) {
			var (
				in  objLinearInput
				out objLinearOutput
				err error
			)
			switch n := rng.IntN(20); {
			case n < 5:
				in.op = "get"
				var r io.ReadCloser
				var info ports.ObjectInfo
				if r, info, err = s.Get(ctx, "o", ports.GetObjectOptions{}); err == nil {
					var b []byte
					b, err = io.ReadAll(r)
					_ = r.Close()
					out = objLinearOutput{found: true, content: string(b), etag: info.ETag, size: info.Size}
				}
			case n < 8:
				in.op = "stat"
				var info ports.ObjectInfo
				if info, err = s.Stat(ctx, "o"); err == nil {
					out = objLinearOutput{found: true, etag: info.ETag, size: info.Size}
				}
			case n < 17:
				in.op, in.content = "put", fmt.Sprintf("w%d.%d", w, i)
				switch {
				case !caps.ConditionalPut || n < 11:
				case n < 13:
					in.ifAbsent = true
				default:
					in.ifMatch = etag
					if etag == "" {
						in.ifAbsent = true
					}
				}
				var info ports.ObjectInfo
				if info, err = s.Put(ctx, "o", strings.NewReader(in.content), ports.PutObjectOptions{IfAbsent: in.ifAbsent, IfMatch: in.ifMatch}); err == nil {
					out = objLinearOutput{found: true, etag: info.ETag, size: info.Size}
				}
			default:
				in.op = "delete"
				err = s.Delete(ctx, "o")
			}
			switch {
			case errors.Is(err, ports.ErrConflict):
				out.conflict, err = true, nil
			case errors.Is(err, ports.ErrNotFound):
				out.notFound, etag, err = true, "", nil
			case err != nil:
			case in.op == "delete":
				etag = ""
			default:
				etag = out.etag
			}
			return in, out, err
		}
	})
}
