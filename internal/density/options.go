package density

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Options tune how a model is built and refreshed. The zero value takes the
// defaults.
type Options struct {
	// MaxLevel is the finest grid level: cells of 2^-MaxLevel of the world's
	// width (level 16: 611 m at the equator, 376 m at 52°N). 1..16.
	MaxLevel int
	// MaxCells caps the cells of a model, over all levels. A build that would
	// hold more drops its finest levels until it fits (coarser cells, same
	// totals). At most 36 bytes a cell (24 for a point relation), and up to
	// 20 more for each cell on the edge of an edge row that holds both
	// features beyond ±85.0511° and others (see edgeRow).
	MaxCells int
	// SampleRows: a relation the planner estimates above this many rows is
	// read as a Bernoulli sample of about this many rows, scaled back.
	SampleRows int
	// HeavyBytes: a geometry stored in at least this many bytes is always
	// read (never sampled out), with weight 1.
	HeavyBytes int
	// StatementTimeout bounds the build's query (SET LOCAL statement_timeout).
	StatementTimeout time.Duration
	// Interval is how often a Refresher rebuilds after a success;
	// RetryInterval, after a failure.
	Interval, RetryInterval time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Shelf, when set, lends a build the model of an unchanged relation
	// (see Shelf); nil: every build reads the relation's cells.
	Shelf *Shelf
	// Slots, when set, bounds how many builds sharing it run at once (see
	// Slots); nil: no bound.
	Slots *Slots
	// Logger, when set, hears of a Refresher's first failed build after a
	// success, and of the success that ends a run of failures.
	Logger *slog.Logger
}

// Defaults for unset Options fields.
const (
	DefaultMaxLevel         = 16
	DefaultMaxCells         = 1 << 19
	DefaultSampleRows       = 1_000_000
	DefaultHeavyBytes       = 8192
	DefaultStatementTimeout = time.Minute
	DefaultInterval         = 10 * time.Minute
	DefaultRetryInterval    = 30 * time.Second
	maxMaxLevel             = 16 // a cell key is row<<16 | column
	minMaxCells             = 1024
)

// withDefaults fills unset fields and validates the rest.
func (o Options) withDefaults() (Options, error) {
	if o.MaxLevel == 0 {
		o.MaxLevel = DefaultMaxLevel
	}
	if o.MaxCells == 0 {
		o.MaxCells = DefaultMaxCells
	}
	if o.SampleRows == 0 {
		o.SampleRows = DefaultSampleRows
	}
	if o.HeavyBytes == 0 {
		o.HeavyBytes = DefaultHeavyBytes
	}
	if o.StatementTimeout == 0 {
		o.StatementTimeout = DefaultStatementTimeout
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.MaxLevel < 1 || o.MaxLevel > maxMaxLevel {
		bad("max level %d must be within 1..%d", o.MaxLevel, maxMaxLevel)
	}
	if o.MaxCells < minMaxCells {
		bad("max cells %d must be at least %d", o.MaxCells, minMaxCells)
	}
	if o.SampleRows < 1 || o.HeavyBytes < 1 {
		bad("sample rows %d and heavy bytes %d must be positive", o.SampleRows, o.HeavyBytes)
	}
	if o.StatementTimeout < time.Millisecond || o.Interval < time.Millisecond || o.RetryInterval < time.Millisecond {
		bad("statement timeout %s, interval %s and retry interval %s must be at least 1ms",
			o.StatementTimeout, o.Interval, o.RetryInterval)
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("density options: %w", err)
	}
	return o, nil
}
