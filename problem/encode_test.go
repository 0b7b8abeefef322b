package problem

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A 429's document, as toll writes it.
func exhaustedDoc() map[string]any {
	return map[string]any{
		"type": TypeBase + string(Exhausted), "title": "Too Many Requests", "status": 429,
		"detail":   "this request costs 60 tokens; 0.25 remain. Retry in 3 s.",
		"instance": "/tiles/places/1/0/1.mvt", "cost": 60.0, "remaining": 0.25, "retry_after": 3,
		"violated-policies": []string{"free"},
	}
}

func TestAppendDocumentIsEncodingJSON(t *testing.T) {
	for _, doc := range []map[string]any{
		exhaustedDoc(),
		{},
		{"a": "<b>&\"x\"\\\n\r\t\b\f\x00\x1f\x7f é \u2028\u2029 \xff\xfe", "n": -12, "big": int64(1) << 62, "t": true, "f": false},
		{"tiny": 1e-7, "small": 0.000001, "huge": 1e21, "neg": -2.5e-9, "zero": 0.0, "negzero": math.Copysign(0, -1), "third": 1.0 / 3},
		{"list": []string{}, "nil": []string(nil), "many": []string{"a", "<", ""}},
	} {
		want, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendDocument(nil, doc)
		if !ok || string(got) != string(want) {
			t.Errorf("appendDocument = %s (%v)\nencoding/json = %s", got, ok, want)
		}
	}
}

func TestAppendDocumentDeclinesOtherValues(t *testing.T) {
	for _, v := range []any{math.NaN(), math.Inf(1), map[string]any{}, []int{1}, uint(1), nil} {
		if _, ok := appendDocument(nil, map[string]any{"v": v}); ok {
			t.Errorf("appendDocument took %T %v", v, v)
		}
	}
}

// FuzzAppendDocument holds appendDocument to encoding/json for any
// strings, integers and numbers.
func FuzzAppendDocument(f *testing.F) {
	f.Add("detail", "Retry in 3 s.", 429, 0.25)
	f.Add("<&>", "\u2028\xff\x01", -1, 1e-7)
	f.Fuzz(func(t *testing.T, k, s string, n int, x float64) {
		doc := map[string]any{k: s, k + "n": n, k + "x": x, "list": []string{s, k}}
		want, err := json.Marshal(doc)
		got, ok := appendDocument(nil, doc)
		if err != nil {
			if ok {
				t.Fatalf("encoding/json failed (%v), appendDocument wrote %s", err, got)
			}
			return
		}
		if !ok || string(got) != string(want) {
			t.Fatalf("appendDocument = %s (%v)\nencoding/json = %s", got, ok, want)
		}
	})
}

// BenchmarkWriteExhausted times writing a 429 problem with its members.
func BenchmarkWriteExhausted(b *testing.B) {
	r := httptest.NewRequest(http.MethodGet, "/tiles/places/1/0/1.mvt", nil)
	e := &Error{Code: Exhausted, RetryAfter: 3, Detail: "this request costs 60 tokens; 0.25 remain. Retry in 3 s.",
		Extra: map[string]any{"cost": 60.0, "remaining": 0.25, "retry_after": 3, "violated-policies": []string{"free"}}}
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		Write(w, r, e)
	}
}

// BenchmarkEncodeExhausted: a 429's document through encoding/json (the
// baseline) and through appendDocument, in the same run.
func BenchmarkEncodeExhausted(b *testing.B) {
	doc := exhaustedDoc()
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendDocument", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 512)
		for b.Loop() {
			if _, ok := appendDocument(buf[:0], doc); !ok {
				b.Fatal("declined")
			}
		}
	})
}
