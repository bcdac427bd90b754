package quota_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/abi-engine/engine/internal/quota"
)

func TestATakePastTheHoldersShareIsRefusedAndTakesNothing(t *testing.T) {
	q := quota.New(100, 40)
	if err := q.Take("a", 30); err != nil {
		t.Fatal(err)
	}
	err := q.Take("a", 11)
	var over *quota.Over
	if !errors.As(err, &over) || !over.Share || over.Held != 30 || over.Asked != 11 || over.Bound != 40 || over.Holder != "a" {
		t.Fatalf("a take past a's share of 40 answered %#v (%v)", over, err)
	}
	if q.Held() != 30 {
		t.Fatalf("after the refused take, %d are held, want 30", q.Held())
	}
	if err := q.Take("b", 40); err != nil {
		t.Fatalf("another holder's take within its share: %v", err)
	}
}

func TestATakePastTheWholeIsRefusedThoughWithinTheShare(t *testing.T) {
	q := quota.New(100, 40)
	for _, h := range []string{"a", "b"} {
		if err := q.Take(h, 40); err != nil {
			t.Fatal(err)
		}
	}
	err := q.Take("c", 21)
	var over *quota.Over
	if !errors.As(err, &over) || over.Share || over.Held != 80 || over.Bound != 100 {
		t.Fatalf("a take past the whole of 100 answered %#v (%v)", over, err)
	}
	if err := q.Take("c", 20); err != nil {
		t.Fatalf("a take that fills the whole exactly: %v", err)
	}
}

func TestWhatIsGivenBackCanBeTakenAgain(t *testing.T) {
	q := quota.New(10, 10)
	if err := q.Take("a", 10); err != nil {
		t.Fatal(err)
	}
	q.Give("a", 4)
	if err := q.Take("b", 4); err != nil {
		t.Fatalf("the whole freed by a give: %v", err)
	}
	q.Give("a", 6)
	q.Give("b", 4)
	if q.Held() != 0 {
		t.Fatalf("all given back, %d are held", q.Held())
	}
	if err := q.Take("a", 10); err != nil {
		t.Fatalf("a's share after it gave everything back: %v", err)
	}
}

func TestTakesAtOnceNeverHoldMoreThanTheWhole(t *testing.T) {
	const whole = 64
	q := quota.New(whole, whole)
	var held, most atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := string(rune('a' + g%4))
			for range 2000 {
				if q.Take(who, 3) != nil {
					continue
				}
				now := held.Add(3)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				held.Add(-3)
				q.Give(who, 3)
			}
		}()
	}
	wg.Wait()
	if most.Load() > whole {
		t.Fatalf("takes at once held %d, more than the whole of %d", most.Load(), whole)
	}
	if q.Held() != 0 {
		t.Fatalf("every take given back, %d are held", q.Held())
	}
}
