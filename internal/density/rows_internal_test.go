package density

import "testing"

// TestRowChunks: rows added one by one come back in order and all of
// them, for counts around every chunk's end — none, the first chunk (64),
// the doubling ones, and past the largest chunk (rowChunk) — in one slice
// with nothing of the chunks' spare room.
func TestRowChunks(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 65, 192, 193, 4032, 4033, 8128, 8129, 3*rowChunk + 1000} {
		var g rowChunks
		for i := range n {
			g.add(cellRow{key: uint64(i)})
		}
		got := g.rows()
		if len(got) != n || cap(got) > n+n/8+64 {
			t.Fatalf("%d rows: len %d, cap %d", n, len(got), cap(got))
		}
		for i, r := range got {
			if r.key != uint64(i) {
				t.Fatalf("%d rows: row %d has key %d, out of order", n, i, r.key)
			}
		}
	}
}
