package proxy

import (
	"testing"
	"time"
)

// TestGRPCTimeoutRoundsUp: the grpc-timeout sent upstream is never shorter
// than what is left of the detached call, so the server's deadline cannot
// come first (a server cut off first may answer a transient code that
// would release the key of a call that may have acted).
func TestGRPCTimeoutRoundsUp(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "1m"},
		{-time.Second, "1m"},
		{time.Microsecond, "1m"},
		{1500 * time.Microsecond, "2m"},
		{5 * time.Second, "5000m"},
		{5*time.Second + time.Nanosecond, "5001m"},
		{1e8*time.Millisecond - time.Millisecond, "99999999m"},
		{1e8 * time.Millisecond, "100000S"},
		{1e8*time.Millisecond + time.Millisecond, "100001S"},
	} {
		if got := grpcTimeout(c.d); got != c.want {
			t.Errorf("grpcTimeout(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

// TestInProcessInvalidStatusPanics: in process, a handler's invalid status
// panics as net/http's own writer does, instead of being decided on
// (status 0 released the key, then panicked in the outer writer).
func TestInProcessInvalidStatusPanics(t *testing.T) {
	for _, code := range []int{0, 99, 1000} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("WriteHeader(%d) did not panic", code)
				}
			}()
			(&capture{header: make(map[string][]string)}).WriteHeader(code)
		}()
	}
}
