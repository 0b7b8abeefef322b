package calibrate

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteText writes one line per group: its fitted model, how many samples
// fitted it and how many ranked it, and the held-out ρ of price and of
// settled cost against measured time.
func (rep Report) WriteText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "group\tfitted\theld out\ttimed out\tquery_ms\tfeature_ms\tvertex_ms\tρ price\tρ settled\t")
	for _, g := range rep.Groups {
		censored := 0
		for _, s := range rep.Samples {
			if s.Group == g.Name && s.Censored {
				censored++
			}
		}
		if g.Err != nil {
			fmt.Fprintf(tw, "%s\t%d\t\t%d\t%v\t\t\t\t\t\n", g.Name, g.Fitted, censored, g.Err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.4g\t%.4g\t%.4g\t%.3f\t%.3f\t\n", g.Name, g.Fitted, g.HeldOut, censored,
			g.Work.QueryMS, g.Work.FeatureMS, g.Work.VertexMS, g.RhoEst, g.RhoSett)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n%d requests timed in %s; ρ is Spearman's, over the held-out requests only\n", len(rep.Samples), rep.Took.Round(1e8))
}
