package framework

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer safe for a process's writes (its output copier) and a test's
// reads at once: where a suite keeps the log of an operator it runs.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
