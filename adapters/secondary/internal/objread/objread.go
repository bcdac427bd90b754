// Package objread reads a Put's content in chunks the way every object
// storage adapter and the engine's facade must: only the reader's own end
// ends the object.
package objread

import "io"

// Full reads into buf until it is full or r ends or fails, and answers
// r's own error: io.EOF at the end, whatever was read before it. Unlike
// io.ReadFull, which turns an end after some bytes into
// io.ErrUnexpectedEOF, it tells a reader that ended from one that was cut
// short (an HTTP body whose client went away answers
// io.ErrUnexpectedEOF), whose bytes are not the whole object.
func Full(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
