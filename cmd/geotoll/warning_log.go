package main

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// warningLog logs the warnings of a check that runs again and again (the
// storage refresh, every tiles.storage_refresh): each warning once, when
// a check first finds it, and once more, at info, when a check no longer
// finds it — not at every check that finds it again. Warnings are told
// apart by their text. The zero value is ready; it is safe for concurrent
// use.
type warningLog struct {
	mu       sync.Mutex
	standing map[string]bool // the warnings logged and not cleared since
}

// report logs what one check found: each of warnings that is not standing
// with msg at warn, and — when the check is complete (one that failed
// part-way may have missed warnings that still stand) — each standing
// warning it did not find with msg + " warning cleared" at info, in the
// order of their text.
func (w *warningLog) report(ctx context.Context, logger *slog.Logger, msg string, warnings []string, complete bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.standing == nil {
		w.standing = make(map[string]bool)
	}
	found := make(map[string]bool, len(warnings))
	for _, text := range warnings {
		found[text] = true
		if !w.standing[text] {
			w.standing[text] = true
			logger.LogAttrs(ctx, slog.LevelWarn, msg, slog.String("err", text))
		}
	}
	if !complete {
		return
	}
	var cleared []string
	for text := range w.standing {
		if !found[text] {
			cleared = append(cleared, text)
		}
	}
	slices.Sort(cleared)
	for _, text := range cleared {
		delete(w.standing, text)
		logger.LogAttrs(ctx, slog.LevelInfo, msg+" warning cleared", slog.String("err", text))
	}
}
