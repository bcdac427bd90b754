package vecindex

import "golang.org/x/sys/cpu"

// hasAVX2 selects the assembly kernels, which take eight floats per fused
// multiply-add: about five times the unrolled Go loop at dimension 384.
var hasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func dotAVX2(a, b []float32) float32

//go:noescape
func l2AVX2(a, b []float32) float32

// dot is the inner product of a and b, which have the same length.
func dot(a, b []float32) float32 {
	if hasAVX2 {
		return dotAVX2(a, b[:len(a)])
	}
	return dotGo(a, b)
}

// l2 is the squared euclidean distance between a and b, which have the
// same length.
func l2(a, b []float32) float32 {
	if hasAVX2 {
		return l2AVX2(a, b[:len(a)])
	}
	return l2Go(a, b)
}
