package objectstorage

// base is the Store a tier is, swept or not.
func base(t Tier) *Store {
	if s, ok := t.(*SweptStore); ok {
		return s.Store
	}
	return t.(*Store)
}

// SetMaxValue lowers the largest value t keeps, so that a test can plant
// an object larger than any entry without writing MaxValue bytes.
func SetMaxValue(t Tier, n int) { base(t).most = n }

// SetSweepPages sets how many pages of its listing one sweep of t looks
// at, so that a test can span sweeps without storing thousands of entries.
func SetSweepPages(t *SweptStore, n int) { t.pages = n }
