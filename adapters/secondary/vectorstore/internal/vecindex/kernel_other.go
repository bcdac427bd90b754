//go:build !amd64

package vecindex

// dot is the inner product of a and b, which have the same length.
func dot(a, b []float32) float32 { return dotGo(a, b) }

// l2 is the squared euclidean distance between a and b, which have the
// same length.
func l2(a, b []float32) float32 { return l2Go(a, b) }
