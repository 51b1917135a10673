// Package syncbuf is a bytes.Buffer that a process's output goroutines
// write while a test reads it: the sink tests give a logger or an
// exec.Cmd's Stdout and Stderr.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is an in-memory byte sink safe for concurrent Write and String.
// The zero value is empty and ready to use; it must not be copied after
// first use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
