package density

import (
	"testing"
	"time"
)

// An entry unused for longer than shelfIdle is dropped by the next put;
// a get keeps an entry in use.
func TestShelfDropsIdleEntries(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	s := NewShelf()
	s.now = func() time.Time { return now }
	a, b, c := &Model{}, &Model{}, &Model{}
	s.put("a", "1:1", a)
	s.put("b", "1:1", b)
	now = now.Add(shelfIdle / 2)
	if s.get("b", "1:1") != b {
		t.Fatal("b not lent")
	}
	now = now.Add(shelfIdle/2 + time.Second)
	s.put("c", "1:1", c)
	if s.get("a", "1:1") != nil {
		t.Error("a, unused for longer than shelfIdle, is still lent")
	}
	if s.get("b", "1:1") != b || s.get("c", "1:1") != c {
		t.Error("an entry in use was dropped")
	}
	if s.get("c", "2:1") != nil {
		t.Error("a model lent for another signature")
	}
}
