// Package logbuf is a log sink for tests: a buffer that the goroutines of
// the code under test write while the test reads it.
package logbuf

import (
	"bytes"
	"log/slog"
	"sync"
)

// Buffer collects what is written to it. The zero value is ready for use,
// and safe for several goroutines.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what has been written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger returns a text logger into a new buffer, at level and above,
// and the buffer.
func Logger(level slog.Level) (*slog.Logger, *Buffer) {
	b := &Buffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: level})), b
}
