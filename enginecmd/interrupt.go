package enginecmd

import (
	"context"
	"io"
)

// A transfer's ends may be files that block for as long as another process
// pleases: stdin fed by a producer that pauses, stdout read by a consumer
// that stops reading, a FIFO. A read or write blocked on one ignores the
// command's context, so a signal ended nothing until the other process
// went on or away, and a command that served held the lease meanwhile.
// These wrappers make each read and write return once the context ends,
// leaving the blocked call to a goroutine of its own, which the process's
// exit ends.

// ioResult is what a read or write returned.
type ioResult struct {
	n   int
	err error
}

// ctxReader reads r until ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
	buf []byte
}

func interruptibleReader(ctx context.Context, r io.Reader) io.Reader {
	return &ctxReader{ctx: ctx, r: r}
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	// The read fills a buffer of the reader's own, copied out when it
	// returns in time: p may be reused by the caller once a read is given
	// up, and an abandoned read must not write into it later.
	if cap(c.buf) < len(p) {
		c.buf = make([]byte, len(p))
	}
	buf := c.buf[:len(p)]
	done := make(chan ioResult, 1)
	go func() {
		n, err := c.r.Read(buf)
		done <- ioResult{n, err}
	}()
	select {
	case res := <-done:
		return copy(p, buf[:res.n]), res.err
	case <-c.ctx.Done():
		c.buf = nil
		return 0, c.ctx.Err()
	}
}

// ctxWriter writes to w until ctx ends.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
	buf []byte
}

func interruptibleWriter(ctx context.Context, w io.Writer) io.Writer {
	return &ctxWriter{ctx: ctx, w: w}
}

func (c *ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	// Written from a copy, for the reason Read reads into one.
	c.buf = append(c.buf[:0], p...)
	buf := c.buf
	done := make(chan ioResult, 1)
	go func() {
		n, err := c.w.Write(buf)
		done <- ioResult{n, err}
	}()
	select {
	case res := <-done:
		return res.n, res.err
	case <-c.ctx.Done():
		c.buf = nil
		return 0, c.ctx.Err()
	}
}
