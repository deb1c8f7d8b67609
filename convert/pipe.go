package convert

import (
	"context"
	"io"
)

// blockSize is the unit of streaming work: big enough that syscalls and
// channel hand-offs cost nothing, small enough that memory stays flat.
const blockSize = 8 << 20

// pipe runs fill and drain concurrently over a few buffers: fill produces
// the next block (reading, converting) while drain consumes the previous
// one (hashing, writing), so that on two or more cores I/O and CPU work
// overlap. fill returns how many bytes it put in buf, and io.EOF once there
// is nothing more; drain sees blocks in order.
func pipe(ctx context.Context, size int, fill func(buf []byte) (int, error), drain func([]byte) error) error {
	const depth = 3
	free := make(chan []byte, depth)
	for range depth {
		free <- make([]byte, size)
	}
	type block struct {
		b   []byte
		err error
	}
	// Every block in flight holds a buffer, so full never blocks fill.
	full := make(chan block, depth)
	done := make(chan struct{})
	go func() {
		defer close(full)
		for {
			var buf []byte
			select {
			case <-done:
				return
			case buf = <-free:
			}
			n, err := fill(buf)
			full <- block{buf[:n], err}
			if err != nil {
				return
			}
		}
	}()
	// Returning early stops fill and waits for it, so that it never runs
	// after the caller has closed what it reads.
	defer func() {
		close(done)
		for range full {
		}
	}()
	for b := range full {
		if len(b.b) > 0 {
			if err := drain(b.b); err != nil {
				return err
			}
		}
		if b.err == io.EOF {
			return nil
		}
		if b.err != nil {
			return b.err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		free <- b.b[:cap(b.b)]
	}
	return nil
}

// readBlock fills buf from r, with io.EOF only when nothing was left.
func readBlock(r io.Reader, buf []byte) (int, error) {
	n, err := io.ReadFull(r, buf)
	if err == io.ErrUnexpectedEOF {
		err = nil
	}
	return n, err
}
