package loadtest

import (
	"fmt"
	"io"
	"strings"
	"time"
)

var crawlColumns = []string{"phase", "honest requests", "honest p50", "honest p99", "p99 × alone", "honest failed",
	"crawler requests", "crawler 200/204", "crawler 429", "crawler 503 refused", "crawler 503 admitted", "crawler other",
	"crawler addresses", "statements at once (max)", "oldest statement"}

// WriteCrawlTable writes the phases of RunCrawl as a Markdown table: the
// honest caller's p50 and p99 (and p99 as a multiple of the phase
// alone's) and failed requests, what the crawlers got by status — their
// 503s split into refusals before admission (the budget shared by every
// caller spent, the rate limiter unavailable) and failures of admitted
// requests (a query timed out) — from how many addresses, and the most
// statements the watched role ran at once and the oldest of them.
func WriteCrawlTable(w io.Writer, phases []CrawlPhase) {
	fmt.Fprintf(w, "| %s |\n| --- |%s\n", strings.Join(crawlColumns, " | "), strings.Repeat(" ---: |", len(crawlColumns)-1))
	var alone time.Duration // RunCrawl's first phase is the honest caller alone
	if len(phases) > 0 && phases[0].Name == PhaseCrawlAlone {
		alone = phases[0].Honest.P99
	}
	for _, p := range phases {
		c := p.Crawl
		ok := c.Status[200] + c.Status[204]
		other := c.Requests - ok - c.Status[429] - c.Status[503]
		refused503 := c.Refused - c.Status[429] // Refused counts the whole 429s and the 503s of refusals
		activity, oldest := "–", "–"
		if p.Activity.Samples > 0 {
			activity, oldest = fmt.Sprint(p.Activity.MaxRunning), ms(p.Activity.Oldest)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s |\n", p.Name, p.Honest.N,
			ms(p.Honest.P50), ms(p.Honest.P99), times(p.Honest.P99, alone), p.Failed(), c.Requests, ok, c.Status[429], refused503,
			c.Status[503]-refused503, other, c.Addresses(), activity, oldest)
	}
}

// Failed counts the honest requests that got neither 200 nor 204
// (transport errors included).
func (p CrawlPhase) Failed() int { return failed(p.Status) }

// Addresses counts the crawlers that sent at least one request.
func (c CrawlResult) Addresses() int {
	n := 0
	for _, cr := range c.Crawlers {
		if cr.Requests > 0 {
			n++
		}
	}
	return n
}

// WriteCrawlers writes one line per crawler: its address, what it sent,
// was admitted (and of those, what failed), refused and charged
// (Crawler).
func WriteCrawlers(w io.Writer, c CrawlResult) {
	for _, cr := range c.Crawlers {
		fmt.Fprintf(w, "  %s: %d requests, %d admitted (%d failed), %d refused, %.1f tokens charged\n",
			cr.Addr, cr.Requests, cr.Admitted, cr.Failed, cr.Refused, cr.Cost)
	}
}
