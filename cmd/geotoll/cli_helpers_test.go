package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
)

// runWith runs the command line args with cfg as its configuration.
func runWith(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer) error {
	c := newCLI(stdout, stderr)
	c.preset = &cfg
	root := c.root()
	if err := root.Parse(args); err != nil {
		return err
	}
	return root.Run(ctx)
}

// runLoadtest runs `geotoll loadtest args…` with cfg.
func runLoadtest(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer) error {
	return runWith(ctx, cfg, append([]string{"loadtest"}, args...), stdout, stderr)
}

// runCommand runs a command line as the binary does: a non-zero exit is an
// error carrying what the command wrote to stderr.
func runCommand(ctx context.Context, args ...string) (stdout string, err error) {
	var out, errs bytes.Buffer
	if code := run(ctx, args, &out, &errs); code != exitOK {
		return out.String(), fmt.Errorf("exit %d: %s", code, strings.TrimSpace(errs.String()))
	}
	return out.String(), nil
}
