package density

import (
	"fmt"
	"sync"
	"time"
)

// Shelf keeps the models built in a process with the change detector of
// the relation each was read from (its row count and newest row version,
// as `geotoll prepare` detects changes), so that a refresh of a relation
// nobody wrote to since takes the model on the shelf instead of building
// it again: one scan of the relation (count, max(xmin)) instead of the
// aggregate. Refreshers of one process share it (Options.Shelf): servers
// started side by side in one process, as the tests do, build each model
// once. A view (no xmin) is always built. Entries unused for an hour are
// dropped. Safe for concurrent use.
type Shelf struct {
	mu  sync.Mutex
	now func() time.Time
	all map[string]*shelved
}

type shelved struct {
	signature string
	model     *Model
	used      time.Time
}

// shelfIdle is how long an entry stays unused before it is dropped.
const shelfIdle = time.Hour

// NewShelf returns an empty shelf.
func NewShelf() *Shelf { return &Shelf{now: time.Now, all: make(map[string]*shelved)} }

// shelfKey names rel built under opts: models built with other limits
// are other models.
func shelfKey(rel Relation, opts Options) string {
	return fmt.Sprintf("%s|%d|%d|%d|%d", rel, opts.MaxLevel, opts.MaxCells, opts.SampleRows, opts.HeavyBytes)
}

// get returns the model shelved under key for signature, or nil.
func (s *Shelf) get(key, signature string) *Model {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.all[key]
	if e == nil || e.signature != signature {
		return nil
	}
	e.used = s.now()
	return e.model
}

// put shelves m under key and signature, and drops idle entries.
func (s *Shelf) put(key, signature string, m *Model) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, e := range s.all {
		if now.Sub(e.used) > shelfIdle {
			delete(s.all, k)
		}
	}
	s.all[key] = &shelved{signature: signature, model: m, used: now}
}
