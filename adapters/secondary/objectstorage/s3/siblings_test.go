package s3_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// versitygw keeps a key's segments as directories, makes them for a Put and
// removes those a Delete leaves empty. Callers that put and delete keys
// under one prefix side by side must each see their own calls succeed: a
// Put is no conflict with a Delete of another key. Before, about one Put
// in a hundred, racing a Delete that removed the directory it had just
// made, was refused 409 ExistingObjectIsDirectory, which the adapter
// answered as a conflict, though no object and no condition was in its way.
func TestPutsAndDeletesOfKeysUnderOnePrefixAllSucceed(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	s := open(t, c)
	const workers, rounds = 4, 150
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failed = append(failed, fmt.Sprintf(format, args...))
	}
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				key := fmt.Sprintf("d%d/e%d/w%d", i%3, i%2, w)
				opts := ports.PutObjectOptions{}
				if i%4 == 0 {
					opts.IfAbsent = true
				}
				if _, err := s.Put(t.Context(), key, strings.NewReader(key), opts); err != nil {
					fail("Put %q %+v: %v", key, opts, err)
					continue
				}
				if err := s.Delete(t.Context(), key); err != nil {
					fail("Delete %q: %v", key, err)
				}
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d of %d Puts and Deletes failed, the first: %s", len(failed), 2*workers*rounds, failed[0])
	}
}
