package proxy

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"time"
)

// h2cOffDebug is the GOAWAY debug data an HTTP/2 client without TLS gets
// from the standalone proxy with server.h2c off; grpc-go prints it in the
// call's error ("received prior goaway: code: HTTP_1_1_REQUIRED, debug
// data: ...").
const h2cOffDebug = "idemgate: this listener does not serve HTTP/2 without TLS (h2c); enable server.h2c (--h2c, IDEMGATE_SERVER_H2C=true) for gRPC and other prior-knowledge HTTP/2 clients, or connect over TLS"

// h2cOffDebugInProcess is the same for the engine inside a Go server or
// Caddy, whose listener idemgate does not configure.
const h2cOffDebugInProcess = "idemgate: this server does not serve HTTP/2 without TLS (h2c); enable it on the server (Go: http.Server.Protocols with SetUnencryptedHTTP2; Caddy: the h2c protocol of the server) for gRPC and other prior-knowledge HTTP/2 clients, or connect over TLS"

// goAwayDrain bounds how long a connection answered with goAwayPreface
// is read after the answer, so that closing it does not reset it (a reset
// may discard the GOAWAY before the client reads it).
const goAwayDrain = 5 * time.Second

// isPreface reports whether r is the HTTP/2 client connection preface as
// net/http's HTTP/1 server reads it ("PRI * HTTP/2.0"; RFC 9113 section
// 3.4), as opposed to some other request with method PRI. Its fields are
// not looked at: the request ID is already in them.
func isPreface(r *http.Request) bool {
	return r.Method == "PRI" && r.RequestURI == "*" && r.ProtoMajor == 2 && r.ProtoMinor == 0
}

// goAwayPreface answers an HTTP/2 client preface in HTTP/2, which is what
// the client reads: the server preface (an empty SETTINGS frame) and a
// GOAWAY with HTTP_1_1_REQUIRED whose debug data says what to enable,
// then the end of the connection. An HTTP/1.1 answer would be read as a
// frame header ("http2: frame too large", grpc-go's "note that the frame
// header looked like an HTTP/1.1 header") and hide the reason.
//
// The GOAWAY names the client's first stream as the last one, although
// nothing was processed: a client retries a stream above it on a new
// connection by itself (grpc-go's transparent retry), to the same
// listener and the same answer, and fails with "the connection is
// draining" in the end, without the reason; a stream at or below it ends
// with the connection, and grpc-go's error then quotes the debug data
// ("received prior goaway: code: HTTP_1_1_REQUIRED, debug data: ...").
// Nothing reached the upstream either way.
//
// It takes the connection over, so it reports false, and the caller
// answers in HTTP/1.1, when w cannot be hijacked.
func (p *Proxy) goAwayPreface(w http.ResponseWriter) bool {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	debug := h2cOffDebug
	if p.next != nil {
		debug = h2cOffDebugInProcess
	}
	_ = conn.SetDeadline(time.Now().Add(goAwayFirstStream))
	// SETTINGS: length 0, type 0x4, no flags, stream 0.
	_, _ = buf.Write([]byte{0, 0, 0, 0x4, 0, 0, 0, 0, 0})
	_ = buf.Flush()
	last := firstStream(buf.Reader)
	// GOAWAY: type 0x7 on stream 0, the last stream, the error code
	// HTTP_1_1_REQUIRED (0xd, RFC 9113 section 7), the debug data.
	n := 8 + len(debug)
	frame := make([]byte, 0, 9+n)
	frame = append(frame, byte(n>>16), byte(n>>8), byte(n), 0x7, 0, 0, 0, 0, 0)
	frame = binary.BigEndian.AppendUint32(frame, last)
	frame = binary.BigEndian.AppendUint32(frame, 0xd)
	frame = append(frame, debug...)
	_ = conn.SetWriteDeadline(time.Now().Add(goAwayDrain))
	_, _ = buf.Write(frame)
	_ = buf.Flush()
	go drainAndClose(conn)
	return true
}

// goAwayFirstStream bounds the wait for the client's first stream after
// its preface; a client that opens none by then gets last stream 0.
const goAwayFirstStream = time.Second

// firstStream reads the client's frames after the preface (the rest of
// it, "SM\r\n\r\n", first) until its first HEADERS frame, and returns
// that frame's stream ID; 0 when none comes (an error, the deadline).
func firstStream(r *bufio.Reader) uint32 {
	if _, err := r.Discard(len("SM\r\n\r\n")); err != nil {
		return 0
	}
	var head [9]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return 0
		}
		if head[3] == 0x1 { // HEADERS
			return binary.BigEndian.Uint32(head[5:]) & 0x7fffffff
		}
		n := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
		if _, err := r.Discard(n); err != nil {
			return 0
		}
	}
}

// drainAndClose half-closes conn and reads what the client still sends
// (its SETTINGS, its request) until it closes or goAwayDrain passes, so
// the final close does not reset a connection with unread bytes.
func drainAndClose(conn net.Conn) {
	defer conn.Close()
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = conn.SetReadDeadline(time.Now().Add(goAwayDrain))
	_, _ = io.Copy(io.Discard, conn)
}
