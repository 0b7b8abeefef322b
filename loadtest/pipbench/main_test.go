package main

import (
	"bufio"
	"reflect"
	"strings"
	"testing"
)

func TestRespReadsTile38Answers(t *testing.T) {
	for _, tc := range []struct {
		name, wire string
		want       any
		fails      bool
	}{
		{name: "simple string", wire: "+OK\r\n", want: "OK"},
		{name: "integer", wire: ":42\r\n", want: int64(42)},
		{name: "bulk string", wire: "$5\r\nab\r\nc\r\n", want: "ab\r\nc"},
		{name: "INTERSECTS IDS", wire: "*2\r\n:0\r\n*2\r\n$2\r\n63\r\n$3\r\n181\r\n", want: []any{int64(0), []any{"63", "181"}}},
		{name: "no ids", wire: "*2\r\n:0\r\n*0\r\n", want: []any{int64(0), []any{}}},
		{name: "error reply", wire: "-ERR key not found\r\n", fails: true},
		{name: "unknown type", wire: "?x\r\n", fails: true},
		{name: "cut short", wire: "$5\r\nab", fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &resp{r: bufio.NewReader(strings.NewReader(tc.wire))}
			got, err := r.read()
			if tc.fails {
				if err == nil {
					t.Fatalf("read %q = %#v, want an error", tc.wire, got)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("read %q = %#v, %v; want %#v", tc.wire, got, err, tc.want)
			}
		})
	}
}

func TestIntsParsesPositiveLists(t *testing.T) {
	if got, err := ints("1,10,100"); err != nil || !reflect.DeepEqual(got, []int{1, 10, 100}) {
		t.Errorf("ints(1,10,100) = %v, %v", got, err)
	}
	if got, err := ints(""); err != nil || got != nil {
		t.Errorf(`ints("") = %v, %v; want none`, got, err)
	}
	for _, bad := range []string{"0", "-1", "x", "1,,a"} {
		if _, err := ints(bad); err == nil {
			t.Errorf("ints(%q) accepted", bad)
		}
	}
}

func TestCompareCountsDisagreementsAndSkipsTheUnanswered(t *testing.T) {
	pts := []point{{1, 2}, {3, 4}, {5, 6}, {7, 8}}
	truth := [][]int64{{63}, {}, {1, 2}, {}}
	got := [][]int64{{63}, {63}, nil, {}}
	s := compare(pts, got, truth)
	if !strings.HasPrefix(s, "2 inside; 1 differ from raw (1 not answered, not compared)") || !strings.Contains(s, "[3.000000000, 4.000000000] [63], raw []") {
		t.Errorf("compare = %q", s)
	}
	if s := compare(pts, truth, truth); s != "2 inside; 0 differ from raw" {
		t.Errorf("compare with itself = %q", s)
	}
}

// TestRawSQLIsTheCheckStatement: the raw side runs geotoll's own check
// statement on the source table (quoted), points in EPSG:4326 as they are.
func TestRawSQLIsTheCheckStatement(t *testing.T) {
	sql, err := rawSQL("opendata.countries")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`JOIN "opendata"."countries" AS t`, `ST_Covers(t.geom, ST_SetSRID(ST_MakePoint(p.lng, p.lat), 4326))`, `t.id::bigint AS id`} {
		if !strings.Contains(sql, want) {
			t.Errorf("raw statement lacks %q:\n%s", want, sql)
		}
	}
	if strings.Contains(sql, "ST_Transform") {
		t.Errorf("raw statement transforms the points:\n%s", sql)
	}
}
