package density

import "testing"

// TestJoinRows: chunks of every size the build makes — none, empty, full
// ones of growing capacity and a partial last one — join in order, into a
// slice of exactly their length.
func TestJoinRows(t *testing.T) {
	chunk := func(from, n, capacity int) []cellRow {
		c := make([]cellRow, 0, capacity)
		for i := range n {
			c = append(c, cellRow{key: uint64(from + i)})
		}
		return c
	}
	for _, tc := range []struct {
		name   string
		chunks [][]cellRow
		want   int
	}{
		{"no chunk", nil, 0},
		{"one empty chunk", [][]cellRow{chunk(0, 0, 64)}, 0},
		{"one partial chunk", [][]cellRow{chunk(0, 10, 64)}, 10},
		{"full chunks then a partial one", [][]cellRow{chunk(0, 64, 64), chunk(64, 128, 128), chunk(192, 4096, rowChunk), chunk(4288, 5, rowChunk)}, 4293},
		{"full chunks then an empty one", [][]cellRow{chunk(0, 64, 64), chunk(64, 128, 128), chunk(192, 0, 256)}, 192},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := joinRows(tc.chunks)
			if len(got) != tc.want || cap(got) != tc.want {
				t.Fatalf("len %d cap %d, want %d", len(got), cap(got), tc.want)
			}
			for i, r := range got {
				if r.key != uint64(i) {
					t.Fatalf("row %d has key %d: out of order", i, r.key)
				}
			}
		})
	}
}
