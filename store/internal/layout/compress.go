package layout

import (
	"fmt"
	"net/http"
	"runtime"

	"github.com/klauspost/compress/zstd"
)

// MinCompressBytes is the smallest body a BodyCodec tries to compress.
// zstd's cost is nearly fixed up to about 1 KiB (it builds its entropy
// tables for every frame: 3.1-4.3 µs of CPU per body,
// BenchmarkCompressBySize), while what it saves grows with the body:
// 96 bytes of a 227-byte JSON answer (a tenth of its Valkey record, most
// of which is the key, identity and headers), 235 of 384, 345 of 512 (over
// a quarter of the record). Below this size the frame buys too few bytes
// for the CPU it costs on every fresh request (docs/performance.md,
// "zstd on small bodies"); a stored frame of any size is still read.
const MinCompressBytes = 512

// maxDecodedBytes bounds what one stored body may decompress to. Stored
// bodies are capped by max_response_bytes well below this; the bound only
// keeps a corrupt or hostile record from making the decoder allocate
// without limit.
const maxDecodedBytes = 1 << 30

// BodyCodec compresses response bodies before a store writes them and
// decompresses them when it reads them back, so that every driver (Valkey,
// bolt, Postgres) stores the same zstd frames under the same rules and
// callers only ever see the original bytes (contract rule 7). It is safe
// for concurrent use.
type BodyCodec struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

// NewBodyCodec returns a BodyCodec. The encoder runs at zstd's fastest
// level: the bodies are small and a Complete sits on the request path. It
// keeps one encoder state per P: with one, every concurrent Complete queued
// on it (BenchmarkCompressParallel on 2 CPUs: 12 µs a ~200-byte body, 4.5
// with one per P), holding its response meanwhile; the lower-memory tables
// keep that from costing more than a few hundred KiB per P.
func NewBodyCodec() (*BodyCodec, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithLowerEncoderMem(true), zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxDecodedBytes))
	if err != nil {
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return &BodyCodec{enc: enc, dec: dec}, nil
}

// Compress returns the bytes to store for body and whether they are a zstd
// frame. It leaves the body as it is (false) when compressing would not
// pay: a body that already carries a Content-Encoding (compressed data
// rarely shrinks again, and a replay must send the upstream's exact
// bytes), one shorter than MinCompressBytes, or one whose frame would not
// save at least an eighth of its size (incompressible data).
func (c *BodyCodec) Compress(h http.Header, body []byte) ([]byte, bool) {
	if len(body) < MinCompressBytes || hasContentEncoding(h) {
		return body, false
	}
	z := c.enc.EncodeAll(body, make([]byte, 0, len(body)))
	if len(z) > len(body)-len(body)/8 {
		return body, false
	}
	return z, true
}

// AppendCompress is Compress appending to dst: it appends the zstd frame
// of body, or body itself when Compress would leave it (false), and
// returns the extended slice. Given a dst with MaxCompressedLen(len(body))
// bytes to spare, it allocates nothing, so a caller that writes the body
// after a prefix needs one buffer for both, where Compress's result was
// copied once more (docs/performance.md, "1 MiB request and response
// bodies").
func (c *BodyCodec) AppendCompress(dst []byte, h http.Header, body []byte) ([]byte, bool) {
	if len(body) < MinCompressBytes || hasContentEncoding(h) {
		return append(dst, body...), false
	}
	n := len(dst)
	dst = c.enc.EncodeAll(body, dst)
	if len(dst)-n > len(body)-len(body)/8 {
		return append(dst[:n], body...), false
	}
	return dst, true
}

// MaxCompressedLen returns the most bytes AppendCompress appends for a body
// of n bytes: the larger of n and its worst-case zstd frame.
func (c *BodyCodec) MaxCompressedLen(n int) int {
	return max(n, c.enc.MaxEncodedSize(n))
}

// Decompress reverses Compress for bytes it marked as a zstd frame.
func (c *BodyCodec) Decompress(z []byte) ([]byte, error) {
	b, err := c.dec.DecodeAll(z, nil)
	if err != nil {
		return nil, fmt.Errorf("stored body: zstd: %w", err)
	}
	if b == nil {
		// An empty frame is an empty body, never a nil one: a body that
		// was compressed existed.
		b = []byte{}
	}
	return b, nil
}

func hasContentEncoding(h http.Header) bool {
	for name, vals := range h {
		if http.CanonicalHeaderKey(name) == "Content-Encoding" {
			for _, v := range vals {
				if v != "" && v != "identity" {
					return true
				}
			}
		}
	}
	return false
}
