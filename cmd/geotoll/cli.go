package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/peterbourgon/ff/v3/ffcli"
)

// cli is one invocation of the geotoll command: its command tree (package
// ffcli), the configuration overrides every command's flags record, and
// where it writes.
type cli struct {
	stdout, stderr io.Writer
	o              *overrides
	settingFlags   map[string]bool // names of the configuration flags
	// preset, when set, is the configuration the commands run with
	// instead of loading one (tests build theirs in code).
	preset *Config
	// showVersion is -version (before the command): print the version and
	// exit, whatever command follows.
	showVersion bool
	// strayTold: the GEOTOLL_ variables that set nothing were warned of
	// (once a process).
	strayTold bool
}

// usageError is a command line that cannot run: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// Exit statuses of run.
const (
	exitOK    = 0
	exitError = 1 // the command failed
	exitUsage = 2 // the command line is wrong
)

// run runs the command line args and returns the exit status. -h, -help
// and `help` print usage and exit 0 before anything connects to a
// database; -version prints the version and exits 0 without running the
// command that follows it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI(stdout, stderr)
	root := c.root()
	if err := root.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		// The flag package has printed the error and the usage.
		return exitUsage
	}
	if c.showVersion { // -version, before any command: the command does not run
		fmt.Fprintln(stdout, "geotoll", version)
		return exitOK
	}
	err := root.Run(ctx)
	var usage usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &usage):
		fmt.Fprintln(stderr, "geotoll:", err)
		return exitUsage
	}
	fmt.Fprintln(stderr, "geotoll:", err)
	return exitError
}

func newCLI(stdout, stderr io.Writer) *cli {
	c := &cli{stdout: stdout, stderr: stderr, o: newOverrides(), settingFlags: map[string]bool{"config": true}}
	for _, s := range c.o.settings {
		c.settingFlags[s.Flag] = true
	}
	for name := range flagAliases {
		c.settingFlags[name] = true
	}
	return c
}

// command makes a command whose flag set also holds every configuration
// flag, so that those are honoured before and after the command's name.
func (c *cli) command(name, short, help string, flags func(*flag.FlagSet), exec func(context.Context, []string) error, subs ...*ffcli.Command) *ffcli.Command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	if flags != nil {
		flags(fs)
	}
	c.o.register(fs)
	usage := "geotoll " + name + " [flags]"
	if name == "geotoll" {
		usage = "geotoll [flags] <command> [flags]"
	}
	return &ffcli.Command{Name: name, ShortUsage: usage, ShortHelp: short, LongHelp: help, FlagSet: fs,
		Subcommands: subs, Exec: exec, UsageFunc: c.usage}
}

// config loads the configuration: defaults, the file, the environment,
// the flags.
func (c *cli) config() (Config, error) {
	cfg, err := c.load()
	if err == nil {
		c.warnStray(func(note string) { fmt.Fprintf(c.stderr, "geotoll: warning: %s\n", note) })
	}
	return cfg, err
}

// load reads the environment and builds the configuration (the preset,
// when there is one).
func (c *cli) load() (Config, error) {
	if c.preset != nil {
		return *c.preset, nil
	}
	if err := c.o.readEnv(); err != nil {
		return Config{}, err
	}
	return c.o.load()
}

// warnStray tells, through say, of each GEOTOLL_ variable that sets
// nothing, once a process.
func (c *cli) warnStray(say func(string)) {
	if c.strayTold || c.o == nil || c.preset != nil {
		return
	}
	c.strayTold = true
	for _, s := range c.o.strayEnv(environ()) {
		say(strayNote(s))
	}
}

// configAndLog loads the configuration and makes the logger it asks for.
func (c *cli) configAndLog() (Config, *slog.Logger, error) {
	cfg, err := c.load()
	if err != nil {
		return cfg, nil, err
	}
	log, err := newLogger(cfg, c.stderr)
	if err == nil {
		c.warnStray(func(note string) { log.Warn(note) })
	}
	return cfg, log, err
}

// usage prints a command's usage: its own flags, and one line for the
// configuration flags every command takes.
func (c *cli) usage(cmd *ffcli.Command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "USAGE\n  %s\n\n", cmd.ShortUsage)
	if cmd.ShortHelp != "" {
		fmt.Fprintf(&b, "%s\n\n", cmd.ShortHelp)
	}
	if cmd.LongHelp != "" {
		fmt.Fprintf(&b, "%s\n\n", cmd.LongHelp)
	}
	tw := tabwriter.NewWriter(&b, 0, 2, 2, ' ', 0)
	if len(cmd.Subcommands) > 0 {
		fmt.Fprintln(tw, "COMMANDS")
		for _, s := range cmd.Subcommands {
			fmt.Fprintf(tw, "  %s\t%s\n", s.Name, s.ShortHelp)
		}
		fmt.Fprintln(tw)
	}
	own := false
	cmd.FlagSet.VisitAll(func(f *flag.Flag) {
		if c.settingFlags[f.Name] {
			return
		}
		if !own {
			fmt.Fprintln(tw, "FLAGS")
			own = true
		}
		arg, help := flag.UnquoteUsage(f)
		def := ""
		if f.DefValue != "" && f.DefValue != "false" {
			def = " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(tw, "  -%s %s\t%s%s\n", f.Name, arg, help, def)
	})
	_ = tw.Flush()
	if own {
		b.WriteString("\n")
	}
	b.WriteString(`CONFIGURATION (before or after the command)
  -config FILE            YAML configuration (env GEOTOLL_CONFIG)
  -<key>                  every configuration key as a flag: -listen, -redis-timeout,
                          -throttle-tiers-free-shadow… (env GEOTOLL_LISTEN, GEOTOLL_REDIS_TIMEOUT…)
  geotoll config doc      lists every key, its flag, environment variable and default`)
	return b.String()
}

// checkOutFile reports whether a command that ends by writing the file
// path can write it, before the command runs (a run of minutes must not
// fail at its end for a typo in the path): its directory exists and takes
// a new file, and path, if it exists, is a file that can be written.
func checkOutFile(path string) error {
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0) // neither truncated nor changed
		if err != nil {
			return fmt.Errorf("cannot write %s: %w", path, err)
		}
		return f.Close()
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cannot write %s: its directory %s does not exist", path, dir)
	case err != nil:
		return fmt.Errorf("cannot write %s: %w", path, err)
	case !fi.IsDir():
		return fmt.Errorf("cannot write %s: %s is not a directory", path, dir)
	}
	f, err := os.CreateTemp(dir, ".geotoll-write-check-*")
	if err != nil {
		return fmt.Errorf("cannot write %s: its directory %s takes no new file: %w", path, dir, err)
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}
