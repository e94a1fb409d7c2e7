package main

import "sync"

// expectations bridges the window between our own write and the informer cache seeing it, as the
// Python operator's write-through store does (and as kube-controller-manager's "expectations" do):
// without it, a reconcile triggered by a child's creation reads a cache that does not show the status
// or the sibling children written a moment earlier, and writes them again (a second Event per VM).
// An entry lives only until the cache has caught up, so a later deletion is seen as a deletion.
type expectations struct {
	mu      sync.Mutex
	pending map[string]string
}

func newExpectations() *expectations {
	return &expectations{pending: map[string]string{}}
}

// written records that this process wrote “value“ (a hash, a generation) to “key“.
func (e *expectations) written(key, value string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pending[key] = value
}

// stale reports whether the cache's “cached“ value (""=absent) lags a write of “want“ this process
// made; once the cache shows “want“ the entry is dropped.
func (e *expectations) stale(key, cached, want string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	value, found := e.pending[key]
	if !found {
		return false
	}
	if cached == value {
		delete(e.pending, key)
		return false
	}
	return value == want
}
