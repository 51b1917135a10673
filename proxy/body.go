package proxy

import (
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/idemgate/idemgate/problem"
)

// readBody reads r's body into ex.body, at most ex.route's
// max_request_bytes, and makes r.Body those same bytes again, so whichever
// path forwards r (enforced or passthrough) sends what was read. ServeHTTP
// calls it once, for a request whose decision awaits the body or that its
// route enforces. It answers 413 (declared or actual size over the limit,
// the former before anything is read, so net/http sends no 100 Continue)
// or 400 (read error) itself and returns false.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request, ex *exchange) bool {
	route := ex.route
	if r.ContentLength > route.MaxRequestBytes {
		p.fail(w, ex, problem.TooLarge.With(
			fmt.Sprintf("the body is %d bytes; route %q accepts at most %d", r.ContentLength, route.Name, route.MaxRequestBytes)))
		return false
	}
	body, err := readLimited(r.Body, r.ContentLength, route.MaxRequestBytes)
	if err != nil {
		p.fail(w, ex, problem.BadRequest.With(err.Error()))
		return false
	}
	if int64(len(body)) > route.MaxRequestBytes {
		p.fail(w, ex, problem.TooLarge.With(
			fmt.Sprintf("route %q accepts at most %d bytes", route.Name, route.MaxRequestBytes)))
		return false
	}
	ex.body, ex.read = body, true
	r.Body, r.ContentLength, r.TransferEncoding = http.NoBody, 0, nil
	if len(body) > 0 {
		// The reader lives in the exchange, which is allocated anyway.
		// io.NopCloser keeps the type net/http's transport recognises as
		// a body in memory (it would otherwise flush the header apart).
		ex.bodyReader.Reset(body)
		r.Body, r.ContentLength = io.NopCloser(&ex.bodyReader), int64(len(body))
	}
	return true
}

// maxPrealloc is the largest declared length readLimited allocates before
// the bytes arrive, in bytes: a declared Content-Length costs the client one
// header line, so trusting a larger one let each idle connection pin up to
// max_request_bytes of memory.
const maxPrealloc = 64 << 10

// declaredTrust is how far readLimited trusts a declared Content-Length
// once bytes arrive: with at least 1/declaredTrust of it received, the
// buffer takes the whole declared size at once. A client pins at most
// declaredTrust times what it sent (or maxPrealloc), while a 1 MiB body is
// read with one copy of its first 128 KiB instead of a copy per doubling.
const declaredTrust = 8

// readLimited reads r to its end, but at most limit+1 bytes, exactly as
// io.ReadAll(io.LimitReader(r, limit+1)) would. When size (the declared
// Content-Length; -1 when unknown) is within limit, the buffer starts at
// size+1 bytes or maxPrealloc, whichever is smaller, and doubles as the
// bytes arrive until a doubling would reach size or declaredTrust times
// the bytes received would: then it grows to size+1 at once. A body of the
// declared length ends in a buffer of its own size (one spare byte reads
// the EOF): 1.19 times a 1 MiB body allocated in all, where io.ReadAll's
// growth by a quarter allocated and copied over twice the body
// (docs/performance.md, "1 MiB request and response bodies").
func readLimited(r io.Reader, size, limit int64) ([]byte, error) {
	// limit+1 overflows for a limit of math.MaxInt64 (a valid setting), and
	// a negative count reads nothing: the body would silently become empty.
	most := limit + 1
	if most < limit {
		most = limit
	}
	if size < 0 || size > limit {
		return io.ReadAll(io.LimitReader(r, most))
	}
	buf := make([]byte, 0, min(size+1, maxPrealloc))
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) == size+1 {
				// Longer than declared: read the rest the slow way, still capped.
				rest, err := io.ReadAll(io.LimitReader(r, most-int64(len(buf))))
				return append(buf, rest...), err
			}
			grow := 2 * int64(cap(buf))
			if grow >= size || int64(len(buf))*declaredTrust >= size {
				grow = size + 1 // the EOF byte too, or it alone doubles the buffer
			}
			next := make([]byte, len(buf), grow)
			copy(next, buf)
			buf = next
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// copyBufferSize is the size of the buffers httputil.ReverseProxy copies
// passthrough bodies with (its own default).
const copyBufferSize = 32 << 10

// bufferPool lends the passthrough ReverseProxy its copy buffers, which it
// would otherwise allocate, 32 KiB each, for every request.
type bufferPool struct{ pool sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{pool: sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}}
}

// Get implements httputil.BufferPool.
func (p *bufferPool) Get() []byte { return *p.pool.Get().(*[]byte) }

// Put implements httputil.BufferPool.
func (p *bufferPool) Put(b []byte) {
	if cap(b) == copyBufferSize {
		b = b[:copyBufferSize]
		p.pool.Put(&b)
	}
}
