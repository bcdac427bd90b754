package contracttests_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// offsetCursor is a correct document store whose Find cursor counts the
// documents the pages before gave, rather than naming the last one: it
// pages a collection no one writes to as well as the real ones do.
type offsetCursor struct{ *docmemory.Store }

func (o offsetCursor) Find(ctx context.Context, collection string, q ports.Query) ([]ports.Document, string, error) {
	skip := 0
	if q.Cursor != "" {
		n, ok := strings.CutPrefix(q.Cursor, "skip:")
		var err error
		if skip, err = strconv.Atoi(n); !ok || err != nil || skip < 0 {
			return nil, "", fmt.Errorf("cursor %q: %w", q.Cursor, ports.ErrInvalidArgument)
		}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	var all []ports.Document
	whole := q
	whole.Limit, whole.Cursor = ports.MaxPage, ""
	for {
		docs, next, err := o.Store.Find(ctx, collection, whole)
		if err != nil {
			return nil, "", err
		}
		all = append(all, docs...)
		if next == "" {
			break
		}
		whole.Cursor = next
	}
	all = all[min(skip, len(all)):]
	if len(all) <= limit {
		return all, "", nil
	}
	return all[:limit], "skip:" + strconv.Itoa(skip+limit), nil
}

// A client paging with a cursor while others write may rely on every
// document that stays, and keeps its sort value, coming exactly once; a
// store whose cursor is an offset skips or repeats such documents when
// others insert or delete before the place the paging has reached, so
// the suite must fail it, and pass it where no one writes.
func TestTheDocumentSuiteFailsAStoreWhoseCursorIsAnOffset(t *testing.T) {
	if os.Getenv(faultEnv) == "CursorIsAnOffset" {
		t.Run("faulty", func(t *testing.T) {
			contracttests.RunDocument(t, contracttests.HarnessFunc[ports.DocumentStore](func(t *testing.T) func(*testing.T) ports.DocumentStore {
				store := docmemory.New()
				return func(*testing.T) ports.DocumentStore { return offsetCursor{store} }
			}), contracttests.DocumentCapabilities{})
		})
		return
	}
	out, err := runFault(t, "^TestTheDocumentSuiteFailsAStoreWhoseCursorIsAnOffset$/^faulty$/^(PagingWhileOthersWrite|FindPagination)$", "CursorIsAnOffset")
	if err == nil {
		t.Fatalf("the suite passed a store whose cursor is an offset:\n%s", out)
	}
	if strings.Contains(string(out), "panic:") {
		t.Fatalf("the suite panicked on a store whose cursor is an offset:\n%s", out)
	}
	for _, want := range []string{
		"--- FAIL: TestTheDocumentSuiteFailsAStoreWhoseCursorIsAnOffset/faulty/PagingWhileOthersWrite",
		"present throughout with its sort value unchanged, came",
		"--- PASS: TestTheDocumentSuiteFailsAStoreWhoseCursorIsAnOffset/faulty/FindPagination",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the suite's output lacks %q:\n%s", want, out)
		}
	}
}
