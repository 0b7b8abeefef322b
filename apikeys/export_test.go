package apikeys

// RechecksRunning reports whether Run has started serving Recheck.
func (r *Ring) RechecksRunning() bool {
	r.rechecks.mu.Lock()
	defer r.rechecks.mu.Unlock()
	return r.rechecks.running
}
