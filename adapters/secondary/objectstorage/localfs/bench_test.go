package localfs_test

import (
	"io"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// BenchmarkPut stores a 64 MiB object fed as the engine feeds an upload:
// 256 KiB chunks written into a pipe that Put reads.
func BenchmarkPut(b *testing.B) {
	const size, chunk = 64 << 20, 256 << 10
	s := open(b, b.TempDir())
	buf := make([]byte, chunk)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	b.SetBytes(size)
	for b.Loop() {
		pr, pw := io.Pipe()
		go func() {
			for range size / chunk {
				if _, err := pw.Write(buf); err != nil {
					return
				}
			}
			pw.Close()
		}()
		if _, err := s.Put(b.Context(), "big", pr, ports.PutObjectOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
