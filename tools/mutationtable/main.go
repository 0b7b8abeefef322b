// Command mutationtable turns go-gremlins/gremlins JSON results into the
// mutation score table of `make mutate`: per package, how many mutants were
// killed, lived, timed out, could not compile or were not covered, the
// efficacy (killed / (killed + lived), gremlins' "test efficacy"), and every
// survivor by position, to triage.
//
//	mutationtable [-min 85] [-o scores.md] pkg=results.json...
//
// It prints the table and writes it to -o, and exits 1 when a package's
// efficacy is below -min.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// results is the part of gremlins' JSON output the table needs.
type results struct {
	Files []struct {
		Name      string `json:"file_name"`
		Mutations []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Line   int    `json:"line"`
			Column int    `json:"column"`
		} `json:"mutations"`
	} `json:"files"`
	Elapsed float64 `json:"elapsed_time"`
}

// score is one package's row.
type score struct {
	pkg                                        string
	files                                      []string
	killed, lived, timedOut, notViable, notCov int
	seconds                                    float64
	survivors                                  []string
}

func (s score) efficacy() float64 {
	if s.killed+s.lived == 0 {
		return 100
	}
	return 100 * float64(s.killed) / float64(s.killed+s.lived)
}

func main() {
	minimum := flag.Float64("min", 85, "fail when a package's efficacy is below this percent")
	out := flag.String("o", "", "also write the table to this file")
	flag.Parse()
	var scores []score
	for _, arg := range flag.Args() {
		pkg, path, ok := strings.Cut(arg, "=")
		if !ok {
			fail(fmt.Errorf("argument %q: want pkg=results.json", arg))
		}
		s, err := read(pkg, path)
		if err != nil {
			fail(err)
		}
		scores = append(scores, s)
	}
	var b strings.Builder
	write(&b, scores, *minimum)
	fmt.Print(b.String())
	if *out != "" {
		if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
			fail(err)
		}
	}
	for _, s := range scores {
		if s.efficacy() < *minimum {
			fmt.Fprintf(os.Stderr, "mutationtable: %s kills %.1f %% of its covered mutants, below %g %%\n", s.pkg, s.efficacy(), *minimum)
			os.Exit(1)
		}
	}
}

func read(pkg, path string) (score, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return score{}, err
	}
	var r results
	if err := json.Unmarshal(raw, &r); err != nil {
		return score{}, fmt.Errorf("%s: %w", path, err)
	}
	s := score{pkg: pkg, seconds: r.Elapsed}
	for _, f := range r.Files {
		s.files = append(s.files, f.Name)
		for _, m := range f.Mutations {
			switch m.Status {
			case "KILLED":
				s.killed++
			case "LIVED":
				s.lived++
				s.survivors = append(s.survivors, fmt.Sprintf("%s:%d:%d %s", f.Name, m.Line, m.Column, m.Type))
			case "TIMED OUT":
				s.timedOut++
			case "NOT VIABLE":
				s.notViable++
			case "NOT COVERED":
				s.notCov++
			}
		}
	}
	slices.Sort(s.files)
	slices.Sort(s.survivors)
	return s, nil
}

// write renders the Markdown table, then each package's survivors.
func write(w io.Writer, scores []score, minimum float64) {
	fmt.Fprintln(w, "| package | files mutated | killed | lived | timed out | not viable | not covered | efficacy | time |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, s := range scores {
		mark := ""
		if s.efficacy() < minimum {
			mark = " (below " + fmt.Sprint(minimum) + " %)"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %d | %d | %.1f %%%s | %.0f s |\n", s.pkg, strings.Join(s.files, ", "),
			s.killed, s.lived, s.timedOut, s.notViable, s.notCov, s.efficacy(), mark, s.seconds)
	}
	for _, s := range scores {
		if len(s.survivors) > 0 {
			fmt.Fprintf(w, "\nSurvivors in %s:\n", s.pkg)
			for _, v := range s.survivors {
				fmt.Fprintf(w, "- %s\n", v)
			}
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mutationtable:", err)
	os.Exit(2)
}
