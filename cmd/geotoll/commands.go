package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/peterbourgon/ff/v3/ffcli"
)

// root is the command tree.
func (c *cli) root() *ffcli.Command {
	var root *ffcli.Command
	subs := []*ffcli.Command{
		c.command("serve", "serve the HTTP API", "", nil, noArgs("serve", c.serve)),
		c.command("migrate", "apply the embedded schema migrations (as the schema owner)", "", nil, noArgs("migrate", c.migrate)),
		c.seedCommand(),
		c.prepareCommand(),
		c.keysCommand(),
		c.loadtestCommand(),
		c.calibrateCommand(),
		c.openDataCommand(),
		c.configCommand(),
		c.command("version", "print the version", "", nil, noArgs("version", func(context.Context) error {
			fmt.Fprintln(c.stdout, "geotoll", version)
			return nil
		})),
	}
	help := c.command("help", "print the usage of a command: geotoll help keys create", "", nil,
		func(_ context.Context, args []string) error { return c.help(root, args) })
	root = c.command("geotoll", "Serves vector tiles and geofence queries from PostGIS, charging every request what it costs.", "",
		func(fs *flag.FlagSet) { fs.BoolVar(&c.showVersion, "version", false, "print the version and exit") },
		func(_ context.Context, args []string) error {
			switch {
			case c.showVersion: // (run prints it before any command that follows runs)
				fmt.Fprintln(c.stdout, "geotoll", version)
				return nil
			case len(args) == 0:
				fmt.Fprintln(c.stderr, c.usage(root))
				return usageError{"no command"}
			}
			fmt.Fprintln(c.stderr, c.usage(root))
			return usageError{fmt.Sprintf("unknown command %q", args[0])}
		}, append(subs, help)...)
	return root
}

// help prints the usage of the command args name (of root itself for
// none) on stdout.
func (c *cli) help(root *ffcli.Command, args []string) error {
	cmd := root
	for _, name := range args {
		var next *ffcli.Command
		for _, s := range cmd.Subcommands {
			if s.Name == name {
				next = s
			}
		}
		if next == nil {
			return usageError{fmt.Sprintf("no command %q", strings.Join(args, " "))}
		}
		cmd = next
	}
	fmt.Fprintln(c.stdout, c.usage(cmd))
	return nil
}

// groupExec is the Exec of a command that only holds others: without one
// of them it prints its usage and fails.
func (c *cli) groupExec(cmd **ffcli.Command) func(context.Context, []string) error {
	return func(_ context.Context, args []string) error {
		fmt.Fprintln(c.stderr, c.usage(*cmd))
		if len(args) == 0 {
			return usageError{(*cmd).Name + ": no command"}
		}
		return usageError{fmt.Sprintf("%s: unknown command %q", (*cmd).Name, args[0])}
	}
}

// noArgs is the Exec of a command that takes no arguments: one is a
// usage error naming the command as it is typed ("keys create"), and exec
// does not run.
func noArgs(name string, exec func(context.Context) error) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Sprintf("%s takes no arguments (got %q)", name, args)}
		}
		return exec(ctx)
	}
}

// serve is `geotoll serve`.
func (c *cli) serve(ctx context.Context) error {
	cfg, log, err := c.configAndLog()
	if err != nil {
		return err
	}
	m := &Main{Config: cfg, Logger: log}
	err = m.Open(ctx)
	if ctx.Err() != nil {
		// A signal during start-up: what failed then failed for it, not
		// for the database; nothing is served.
		if err == nil {
			m.Close()
		}
		log.Info("stopped by a signal during start-up: not serving")
		return nil
	}
	if err != nil {
		return err
	}
	return m.Serve(ctx)
}

// migrate is `geotoll migrate`.
func (c *cli) migrate(ctx context.Context) error {
	cfg, log, err := c.configAndLog()
	if err != nil {
		return err
	}
	return migrate(ctx, cfg, log)
}
