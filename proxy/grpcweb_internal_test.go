package proxy

import (
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"testing"
)

// TestGRPCWebStatus: a gRPC-Web answer's status is read from its body's
// one trailer frame, in binary or base64 (several padded chunks too), its
// names in any case; a body that does not end in exactly one well-formed,
// uncompressed trailer frame has no status (outcome unknown: never
// released as transient, never stored).
func TestGRPCWebStatus(t *testing.T) {
	frame := func(flag byte, payload string) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{flag}, uint32(len(payload))), payload...)
	}
	msg, trailer := frame(0, "hello"), frame(0x80, "grpc-message: failover\r\nGrpc-Status: 14\r\n")
	b64 := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, base64.StdEncoding.EncodeToString(p)...)
		}
		return out
	}
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, c := range []struct {
		name   string
		body   []byte
		text   bool
		status string
	}{
		{"message and trailers", cat(msg, trailer), false, "14"},
		{"trailers alone", trailer, false, "14"},
		{"LF line ends", frame(0x80, "grpc-status:0\n"), false, "0"},
		{"text, one chunk", b64(cat(msg, trailer)), true, "14"},
		{"text, a chunk per frame", b64(msg, trailer), true, "14"},
		{"no trailer frame", msg, false, ""},
		{"trailers without grpc-status", cat(msg, frame(0x80, "grpc-message: x\r\n")), false, ""},
		{"a frame after the trailers", cat(trailer, msg), false, ""},
		{"two trailer frames", cat(trailer, trailer), false, ""},
		{"compressed trailers", cat(msg, frame(0x81, "grpc-status: 14\r\n")), false, ""},
		{"cut short", cat(msg, trailer)[:len(msg)+len(trailer)-3], false, ""},
		{"trailing bytes", cat(msg, trailer, []byte{0x80, 0}), false, ""},
		{"text, bad base64", append(b64(cat(msg, trailer)), '!', '!', '!', '!'), true, ""},
		{"text, not a multiple of 4", b64(cat(msg, trailer))[1:], true, ""},
		{"binary read as text", cat(msg, trailer), true, ""},
	} {
		st, ok := grpcWebStatus(c.body, c.text)
		if st != c.status || ok != (c.status != "") {
			t.Errorf("%s: status %q %v, want %q", c.name, st, ok, c.status)
		}
	}
	// Trailers-only (the status in the headers) and HTTP trailers win; a
	// gRPC call's body is never read as gRPC-Web.
	resp := &http.Response{Header: http.Header{"Grpc-Status": {"0"}, "Content-Type": {"application/grpc-web"}}}
	if st, _ := grpcStatus(resp, cat(msg, trailer), true); st != "0" {
		t.Errorf("trailers-only gRPC-Web: %q", st)
	}
	resp = &http.Response{Header: http.Header{"Content-Type": {"application/grpc-web-text+proto"}}}
	if st, _ := grpcStatus(resp, b64(msg, trailer), true); st != "14" {
		t.Errorf("gRPC-Web text answer: %q", st)
	}
	if st, ok := grpcStatus(&http.Response{Header: http.Header{}}, cat(msg, trailer), false); ok {
		t.Errorf("a gRPC answer's body read as gRPC-Web: %q", st)
	}
	for ct, web := range map[string]bool{
		"application/grpc": false, "application/grpc+proto": false, "application/grpc-web": true,
		"application/grpc-web+proto": true, "application/grpc-web-text": true, "Application/gRPC-Web-Text+proto; charset=x": true,
		"application/grpc-webx": false, "application/grpcx": false,
	} {
		h := http.Header{"Content-Type": {ct}}
		if isGRPCWeb(h) != web || isGRPC(h) != (web || ct == "application/grpc" || ct == "application/grpc+proto") {
			t.Errorf("%q: isGRPCWeb %v isGRPC %v", ct, isGRPCWeb(h), isGRPC(h))
		}
	}
}
