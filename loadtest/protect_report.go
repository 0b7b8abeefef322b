package loadtest

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// protectColumns are the columns of WriteProtectTable.
var protectColumns = []string{"phase", "honest requests", "honest p50", "honest p99", "p99 × alone", "honest non-200",
	"abuser requests", "abuser admitted and charged", "abuser charged (tokens)",
	"abuser admitted unpaid (shadow)", "abuser unpaid, priced (tokens)"}

// WriteProtectTable writes the phases as a Markdown table: the honest
// caller's p50 and p99 (and p99 as a multiple of the phase alone's), and
// what the abuser sent; how many of its requests were admitted and
// charged, and the tokens its bucket paid for them (Cost); and how many a
// shadow tier admitted though the bucket could not pay, and the tokens
// they were priced at, of which nothing was spent (ShadowPrice).
func WriteProtectTable(w io.Writer, phases []ProtectPhase) {
	fmt.Fprintf(w, "| %s |\n| --- |%s\n", strings.Join(protectColumns, " | "), strings.Repeat(" ---: |", len(protectColumns)-1))
	var alone time.Duration
	for _, p := range phases {
		if p.Name == PhaseAlone {
			alone = p.Honest.P99
		}
		a := p.Abuser
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %d | %d | %d | %.1f | %d | %.1f |\n", p.Name, p.Honest.N, ms(p.Honest.P50), ms(p.Honest.P99),
			times(p.Honest.P99, alone), failed(p.Status), a.Requests, a.Admitted, a.Cost, a.Shadowed, a.ShadowPrice)
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// times is d as a multiple of base, "–" without a base.
func times(d, base time.Duration) string {
	if base <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", float64(d)/float64(base))
}

// failed counts the requests that got neither 200 nor 204 (transport
// errors, status 0, included).
func failed(status map[int]int) int {
	bad := 0
	for code, n := range status {
		if code != 200 && code != 204 {
			bad += n
		}
	}
	return bad
}

// Geometry of the plot, in SVG user units.
const (
	plotW, plotH      = 720, 300
	plotLeft, plotTop = 60, 20
	plotRight         = 20
	plotBottom        = 50
)

// WriteProtectSVG plots the honest caller's p50 and p99 per second across
// the phases, one after another, on a logarithmic millisecond scale.
func WriteProtectSVG(w io.Writer, phases []ProtectPhase) error {
	var secs []Latencies
	var bounds []int // the second each phase starts at
	for _, p := range phases {
		bounds = append(bounds, len(secs))
		secs = append(secs, p.PerSec...)
	}
	if len(secs) == 0 {
		return fmt.Errorf("protect: nothing to plot")
	}
	lo, hi := 1e9, 0.0
	for _, s := range secs {
		if s.N > 0 {
			lo, hi = min(lo, msf(s.P50)), max(hi, msf(s.P99))
		}
	}
	scale := newLogScale(lo, hi)
	innerW := float64(plotW - plotLeft - plotRight)
	x := func(i int) float64 { return plotLeft + (float64(i)+0.5)*innerW/float64(len(secs)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", plotW, plotH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotW, plotH)
	for _, tick := range scale.ticks() {
		y := scale.y(tick)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g ms</text>`+"\n",
			plotLeft, plotW-plotRight, y, y, plotLeft-4, y+4, tick)
	}
	for i, start := range bounds {
		bx := plotLeft + float64(start)*innerW/float64(len(secs))
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#888" stroke-dasharray="4 3"/><text x="%.1f" y="%d">%s</text>`+"\n",
			bx, bx, plotTop, plotH-plotBottom, bx+3, plotH-plotBottom+14, phases[i].Name)
	}
	for _, line := range []struct {
		color string
		pick  func(Latencies) time.Duration
		label string
	}{{"#1f77b4", func(l Latencies) time.Duration { return l.P50 }, "honest p50"}, {"#d62728", func(l Latencies) time.Duration { return l.P99 }, "honest p99"}} {
		var pts []string
		for i, s := range secs {
			if s.N > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), scale.y(msf(line.pick(s)))))
			}
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", line.color, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", plotW-plotRight-150+75*boolInt(line.label == "honest p99"), plotH-12, line.color, line.label)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d">seconds (one point per second of honest traffic)</text>`+"\n", plotLeft, plotH-12)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// logScale maps milliseconds to the plot's y, logarithmically, from the
// decade below lo to the decade above hi.
type logScale struct{ lo, hi float64 } // log10 of the bounds

func newLogScale(lo, hi float64) logScale {
	lo, hi = max(lo, 0.01), max(hi, 0.01)
	return logScale{lo: math.Floor(math.Log10(lo)), hi: max(math.Ceil(math.Log10(hi)), math.Floor(math.Log10(lo))+1)}
}

func (s logScale) y(ms float64) float64 {
	f := (math.Log10(max(ms, 0.01)) - s.lo) / (s.hi - s.lo)
	return float64(plotH-plotBottom) - f*float64(plotH-plotBottom-plotTop)
}

// ticks are 1, 2 and 5 times each power of ten on the scale.
func (s logScale) ticks() []float64 {
	var out []float64
	for e := s.lo; e <= s.hi; e++ {
		for _, m := range []float64{1, 2, 5} {
			if v := m * math.Pow(10, e); math.Log10(v) <= s.hi+1e-9 {
				out = append(out, v)
			}
		}
	}
	return out
}
