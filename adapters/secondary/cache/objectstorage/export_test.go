package objectstorage

// SetMaxValue lowers the largest value s keeps, so that a test can plant
// an object larger than any entry without writing MaxValue bytes.
func SetMaxValue(s *Store, n int) { s.most = n }
