package loadtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCrawlerAddrs(t *testing.T) {
	a := netip.MustParseAddr
	tests := []struct {
		name  string
		from  netip.Addr
		n     int
		want  []string // first and last
		error string
	}{
		{"sixteen", DefaultCrawlerFrom, 16, []string{"127.0.0.2", "127.0.0.17"}, ""},
		{"across an octet", a("127.0.0.250"), 10, []string{"127.0.0.250", "127.0.1.3"}, ""},
		{"one", a("127.9.9.9"), 1, []string{"127.9.9.9", "127.9.9.9"}, ""},
		{"127.0.0.1 is every other client's", a("127.0.0.1"), 2, nil, "127.0.0.1"},
		{"past 127/8", a("127.255.255.250"), 10, nil, "leave"},
		{"not loopback", a("10.0.0.2"), 2, nil, "not IPv4 loopback"},
		{"IPv6", a("::1"), 1, nil, "not IPv4 loopback"},
		{"none", DefaultCrawlerFrom, 0, nil, "crawlers"},
		{"too many", DefaultCrawlerFrom, MaxCrawlers + 1, nil, "crawlers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CrawlerAddrs(tc.from, tc.n)
			if tc.error != "" {
				if err == nil || !strings.Contains(err.Error(), tc.error) {
					t.Fatalf("CrawlerAddrs(%s, %d) = %v, %v; want an error with %q", tc.from, tc.n, got, err, tc.error)
				}
				return
			}
			if err != nil || len(got) != tc.n || got[0].String() != tc.want[0] || got[len(got)-1].String() != tc.want[1] {
				t.Fatalf("CrawlerAddrs(%s, %d) = %v, %v; want %d from %s to %s", tc.from, tc.n, got, err, tc.n, tc.want[0], tc.want[1])
			}
			seen := map[netip.Addr]bool{}
			for _, x := range got {
				if seen[x] {
					t.Fatalf("%s twice in %v", x, got)
				}
				seen[x] = true
			}
		})
	}
}

// RunCrawl against a stand-in server that keeps a bucket per client
// address, as geotoll does for anonymous callers: each crawler, from its
// own address, gets its own three tiles and then 429s; the honest caller,
// with a key, is always answered. The crawlers that retry at once send
// many refused requests, the polite ones wait out Retry-After. Each
// crawler's fourth tile is admitted and cut at its deadline: a 503 whose
// X-Request-Cost was charged; the 429s' was not.
func TestRunCrawl(t *testing.T) {
	var mu sync.Mutex
	admitted := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		if r.Header.Get("X-API-Key") == "honest" {
			if host != "127.0.0.1" {
				t.Errorf("the honest caller came from %s", host)
			}
			return
		}
		mu.Lock()
		admitted[host]++
		n := admitted[host]
		mu.Unlock()
		switch {
		case n == 4:
			w.Header().Set("X-Request-Cost-Estimate", "1")
			w.Header().Set("X-Request-Cost", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case n > 4:
			w.Header().Set("Retry-After", "1")
			w.Header().Set("X-Request-Cost", "5") // the price it was refused at
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("X-Request-Cost", "2")
		_, _ = w.Write([]byte("tile"))
	}))
	defer srv.Close()
	o := CrawlOptions{Client: &Client{BaseURL: srv.URL, Key: "honest"}, Honest: []string{"/a"}, Rate: 50,
		Crawl: []string{"/z0", "/z1"}, Crawlers: 4, From: DefaultCrawlerFrom, Polite: true, Phase: time.Second}
	phases, err := RunCrawl(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != 3 || phases[0].Name != PhaseCrawlAlone || phases[1].Name != PhaseCrawl || phases[2].Name != PhaseCrawlPolite {
		t.Fatalf("phases %+v", phases)
	}
	for _, p := range phases {
		if p.Honest.N < 25 || p.Failed() != 0 {
			t.Errorf("%s: honest %+v, status %v", p.Name, p.Honest, p.Status)
		}
	}
	if c := phases[0].Crawl; c.Requests != 0 {
		t.Errorf("crawlers while the honest caller is alone: %+v", c)
	}
	rude, polite := phases[1].Crawl, phases[2].Crawl
	if rude.Addresses() != 4 || len(rude.Crawlers) != 4 || rude.Crawlers[3].Addr.String() != "127.0.0.5" {
		t.Fatalf("crawlers %+v", rude.Crawlers)
	}
	for _, c := range rude.Crawlers {
		// Each address its own three tiles: one address for all would
		// have admitted three in all.
		// The fourth, admitted and cut at its deadline, is no refusal.
		if c.Admitted != 4 || c.Failed != 1 || c.Cost != 8 || c.Refused != c.Requests-4 || c.Requests < 10 {
			t.Errorf("rude crawler %+v", c)
		}
	}
	if rude.Status[200] != 12 || rude.Status[503] != 4 || rude.Status[429] != rude.Requests-16 ||
		rude.Admitted != 16 || rude.Failed != 4 || rude.Refused != rude.Status[429] || rude.Cost != 32 {
		t.Errorf("rude crawl %+v", rude)
	}
	for _, c := range polite.Crawlers {
		// Its bucket is spent: one refusal, then it waits 1 s — the
		// phase's end. A second refusal is a late timer at most.
		if c.Admitted != 0 || c.Refused < 1 || c.Refused > 2 {
			t.Errorf("polite crawler %+v", c)
		}
	}
	var table strings.Builder
	WriteCrawlTable(&table, phases)
	if rows := strings.Count(table.String(), "\n"); rows != 5 || !strings.Contains(table.String(), "| "+PhaseCrawl+" | ") {
		t.Errorf("table:\n%s", table.String())
	}
	var lines strings.Builder
	WriteCrawlers(&lines, rude)
	if want := "  127.0.0.2: " + fmt.Sprint(rude.Crawlers[0].Requests) + " requests, 4 admitted (1 failed), " +
		fmt.Sprint(rude.Crawlers[0].Refused) + " refused, 8.0 tokens charged\n"; !strings.HasPrefix(lines.String(), want) {
		t.Errorf("crawlers:\n%s\nwant first\n%s", lines.String(), want)
	}
}

func TestWriteCrawlTable(t *testing.T) {
	ms := time.Millisecond
	phases := []CrawlPhase{
		{Name: PhaseCrawlAlone, Honest: Latencies{N: 100, P50: 2 * ms, P99: 10 * ms}, Status: map[int]int{200: 100}},
		{Name: PhaseCrawl, Honest: Latencies{N: 98, P50: 3 * ms, P99: 25 * ms}, Status: map[int]int{200: 98, 503: 1, 0: 1},
			Crawl: CrawlResult{Requests: 10, Status: map[int]int{200: 2, 429: 5, 503: 2, 404: 1}, Admitted: 3, Failed: 1, Refused: 6,
				Crawlers: []Crawler{{Requests: 6}, {Requests: 4}, {}}},
			Activity: Activity{Samples: 3, MaxRunning: 7, Oldest: 150 * ms}},
	}
	var b strings.Builder
	WriteCrawlTable(&b, phases)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("table:\n%s", b.String())
	}
	if want := "| honest alone | 100 | 2.0 ms | 10.0 ms | 1.00 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | – | – |"; lines[2] != want {
		t.Errorf("alone row\n%s\nwant\n%s", lines[2], want)
	}
	// Of the two 503s one refused (Refused: the five 429s and it), one
	// an admitted request's.
	if want := "| " + PhaseCrawl + " | 98 | 3.0 ms | 25.0 ms | 2.50 | 2 | 10 | 2 | 5 | 1 | 1 | 1 | 2 | 7 | 150.0 ms |"; lines[3] != want {
		t.Errorf("crawl row\n%s\nwant\n%s", lines[3], want)
	}
}

func TestRunCrawlRefuses(t *testing.T) {
	ok := CrawlOptions{Client: &Client{BaseURL: "http://127.0.0.1:1"}, Honest: []string{"/a"}, Rate: 1,
		Crawl: []string{"/z"}, Crawlers: 1, From: DefaultCrawlerFrom, Phase: time.Second}
	for name, edit := range map[string]func(*CrawlOptions){
		"remote":          func(o *CrawlOptions) { o.Client = &Client{BaseURL: "http://192.0.2.1:8080", AllowRemote: true} },
		"IPv6 loopback":   func(o *CrawlOptions) { o.Client = &Client{BaseURL: "http://[::1]:8080"} },
		"no crawl paths":  func(o *CrawlOptions) { o.Crawl = nil },
		"no crawlers":     func(o *CrawlOptions) { o.Crawlers = 0 },
		"not loopback":    func(o *CrawlOptions) { o.From = netip.MustParseAddr("10.1.1.1") },
		"short phase":     func(o *CrawlOptions) { o.Phase = time.Millisecond },
		"no honest paths": func(o *CrawlOptions) { o.Honest = nil },
	} {
		o := ok
		edit(&o)
		if _, err := RunCrawl(context.Background(), o); err == nil {
			t.Errorf("%s: RunCrawl ran", name)
		}
	}
	if err := ok.validate(); err != nil {
		t.Errorf("the valid options: %v", err)
	}
}

// A crawler tells a refusal from an admitted request's failure: a 429, or
// a 503 given before admission (the global budget spent, the rate limiter
// unavailable), is refused and asked again; a 503 of an admitted request
// — charged (X-Request-Cost-Estimate), admitted in shadow, or of problem
// type timeout — is admitted work that failed, and the crawler goes on.
func TestCrawlerTellsRefusalsFromAdmittedFailures(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path]++
		n := asked[r.URL.Path]
		mu.Unlock()
		problemDoc := func(typ string, status int) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"type":%q,"status":%d}`+"\n", typ, status)
		}
		w.Header().Set("X-Request-Cost", "2")
		switch r.URL.Path {
		case "/charged": // admitted, charged, cut at its deadline
			w.Header().Set("X-Request-Cost-Estimate", "1")
			problemDoc("urn:geotoll:problem:timeout", 503)
		case "/shadow": // admitted in shadow, timed out
			w.Header().Set("X-RateLimit-Shadow", "would-refuse")
			problemDoc("urn:geotoll:problem:timeout", 503)
		case "/fixed": // admitted at a fixed price, timed out
			problemDoc("urn:geotoll:problem:timeout", 503)
		case "/global", "/limiter", "/bucket": // refused once, then answered
			if n == 1 {
				switch r.URL.Path {
				case "/global":
					problemDoc("https://iana.org/assignments/http-problem-types#temporary-reduced-capacity", 503)
				case "/limiter":
					problemDoc("urn:geotoll:problem:unavailable", 503)
				default:
					problemDoc("https://iana.org/assignments/http-problem-types#quota-exceeded", 429)
				}
				return
			}
			w.Header().Set("X-Request-Cost-Estimate", "2")
			_, _ = w.Write([]byte("tile"))
		case "/end":
			<-r.Context().Done()
		}
	}))
	defer srv.Close()
	paths := []string{"/charged", "/shadow", "/fixed", "/global", "/limiter", "/bucket", "/end"}
	c, status := crawlFor(t, srv.URL, paths, 2*time.Second)
	// 3 admitted failures, 3 refusals, 3 answers; the last request
	// unanswered at the run's end counts nowhere.
	if c.Requests != 9 || c.Refused != 3 || c.Admitted != 6 || c.Failed != 3 || c.Cost != 2+3*2 ||
		status[503] != 5 || status[429] != 1 || status[200] != 3 {
		t.Errorf("crawler %+v, status %v; want 9 requests, 6 admitted (3 failed), 3 refused, charged 8", c, status)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range []string{"/charged", "/shadow", "/fixed"} {
		if asked[p] != 1 {
			t.Errorf("%s asked %d times, want once: an admitted request's 503 is no refusal", p, asked[p])
		}
	}
}

// An answer whose head came, its body cut by the run's end, counts as a
// request (no whole answer: status 0) beside the charge its head shows.
func TestCrawlerCountsACutAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Cost", "2")
		w.Header().Set("X-Request-Cost-Estimate", "2")
		w.Header().Set("Content-Length", "100")
		_, _ = w.Write([]byte("abc"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, status := crawlFor(t, srv.URL, []string{"/z0"}, 300*time.Millisecond)
	if c.Requests != 1 || status[0] != 1 || c.Cost != 2 || c.Admitted != 1 || c.Failed != 1 || c.Refused != 0 {
		t.Errorf("crawler %+v, status %v; want the cut answer one request, admitted and failed, status 0, charged 2", c, status)
	}
}

// crawlFor runs one impolite crawler of paths against url for d.
func crawlFor(t *testing.T, url string, paths []string, d time.Duration) (Crawler, map[int]int) {
	t.Helper()
	cn, err := newConn(url)
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return crawler(ctx, cn, paths, 0, false)
}
