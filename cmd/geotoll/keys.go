package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/toll"
)

// keysCommand is `geotoll keys create|list|revoke`, against the admin
// (schema owner) database.
func (c *cli) keysCommand() *ffcli.Command {
	var (
		name, tier string
		admin      bool
		keys       *ffcli.Command
	)
	nameFlag := func(fs *flag.FlagSet) {
		fs.StringVar(&name, "name", "", "key name ([A-Za-z0-9_.-], unique among active keys)")
	}
	create := c.command("create", "print a new key (shown once): -name NAME -tier TIER [-admin]; a name is free again once its key is revoked", "", func(fs *flag.FlagSet) {
		nameFlag(fs)
		fs.StringVar(&tier, "tier", "", "tier, one of throttle.tiers")
		fs.BoolVar(&admin, "admin", false, "may administer geofences")
	}, noArgs("keys create", func(ctx context.Context) error {
		check := func(cfg Config) error {
			if err := checkKeyCreate(cfg, name, tier); err != nil {
				return err
			}
			return checkKeyOutput(c.stdout)
		}
		return c.withKeys(ctx, check, func(_ Config, store *apikeys.Store) error {
			return createAPIKey(ctx, store, name, tier, admin, c)
		})
	}))
	list := c.command("list", "every key, revoked ones too", "", nil, noArgs("keys list", func(ctx context.Context) error {
		return c.withKeys(ctx, nil, func(_ Config, store *apikeys.Store) error { return listKeys(ctx, store, c.stdout) })
	}))
	revoke := c.command("revoke", "stop a key: servers refuse it at once (notified by the database; at the latest within throttle.key_refresh): -name NAME", "", nameFlag, noArgs("keys revoke", func(ctx context.Context) error {
		check := func(Config) error {
			if name == "" {
				return usageError{"keys revoke: -name is required"}
			}
			return nil
		}
		return c.withKeys(ctx, check, func(cfg Config, store *apikeys.Store) error {
			switch err := store.Revoke(ctx, name); {
			case errors.Is(err, apikeys.ErrRevoked): // nothing to do, and said so
				fmt.Fprintf(c.stderr, "no active key named %q: it was revoked already\n", name)
				return nil
			case err != nil:
				return fmt.Errorf("keys revoke: %w", err)
			}
			fmt.Fprintf(c.stderr, "revoked %q; running servers refuse it at once (notified by the database; at the latest within %s)\n", name, cfg.Throttle.KeyRefresh)
			return nil
		})
	}))
	keys = c.command("keys", "create, list and revoke API keys", "", nil, c.groupExec(&keys), create, list, revoke)
	for _, k := range []*ffcli.Command{create, list, revoke} {
		k.ShortUsage = "geotoll keys " + k.Name + " [flags]"
	}
	return keys
}

// withKeys runs fn with the key store of the admin database, once the
// configuration is loaded and check (the command's flags; nil: none) has
// passed it: a wrong command line is reported as such, without a
// database.
func (c *cli) withKeys(ctx context.Context, check func(Config) error, fn func(Config, *apikeys.Store) error) error {
	cfg, err := c.config()
	if err != nil {
		return err
	}
	if check != nil {
		if err := check(cfg); err != nil {
			return err
		}
	}
	pool, err := adminPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(cfg, apikeys.NewStore(pool))
}

// checkKeyCreate checks the flags of `keys create` against the
// configuration, before anything connects: a wrong command line
// (usageError, naming the flag) is -name or -tier missing, a name that
// apikeys.ValidName refuses, or a tier that is not one of the configured tiers
// (nor the anonymous one).
func checkKeyCreate(cfg Config, name, tier string) error {
	if name == "" || tier == "" {
		return usageError{"keys create: -name and -tier are required"}
	}
	if !apikeys.ValidName(name) {
		return usageError{fmt.Sprintf("keys create: -name %q must be 1 to 64 of A-Z, a-z, 0-9, '_', '.' and '-'", name)}
	}
	if _, ok := cfg.Throttle.Tiers[tier]; !ok || tier == toll.AnonymousTier {
		return usageError{fmt.Sprintf("keys create: -tier %q is not one of the configured key tiers: %s", tier, strings.Join(keyTiers(cfg), ", "))}
	}
	return nil
}

// createAPIKey creates the key and prints it, alone, to c.stdout: the
// only time it is shown. A key that could not be printed is lost to its
// owner and works all the same: it is revoked, and the command fails. Its
// flags and output were checked before connecting (checkKeyCreate,
// checkKeyOutput).
func createAPIKey(ctx context.Context, store *apikeys.Store, name, tier string, admin bool, c *cli) error {
	// A pipe whose reader is gone fails the write (EPIPE), which revokes
	// the key, instead of killing the process before it can: SIGPIPE is
	// caught (not ignored, which processes started later would inherit)
	// while the key is written.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	plain, k, err := store.Create(ctx, name, tier, admin)
	if errors.Is(err, apikeys.ErrNameTaken) {
		return fmt.Errorf("keys create: a key named %q is active; to rotate it, revoke it first (geotoll keys revoke -name %s: the name is free again once revoked), or pick another name", name, name)
	}
	if err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	if _, werr := fmt.Fprintln(c.stdout, plain); werr != nil {
		return unprinted(ctx, store, k, werr)
	}
	fmt.Fprintf(c.stderr, "created key %q (tier %s, id %d). It is shown only now: store it safely.\n", k.Name, k.Tier, k.ID)
	return nil
}

// unprinted revokes key k, which could not be printed (werr), and returns
// the command's error: the key revoked, or, when that failed too, still
// active and to be revoked by hand.
func unprinted(ctx context.Context, store *apikeys.Store, k apikeys.Key, werr error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := store.RevokeID(rctx, k.ID); err != nil {
		return fmt.Errorf("keys create: the key %q (id %d) could not be printed (%w), and could not be revoked (%w): it is active, unseen; revoke it (geotoll keys revoke -name %s)",
			k.Name, k.ID, werr, err, k.Name)
	}
	return fmt.Errorf("keys create: the key %q (id %d) could not be printed (%w): it was revoked; create it again with a writable standard output", k.Name, k.ID, werr)
}

// checkKeyOutput refuses a standard output that is the null device: the
// key, shown only once, would be lost.
func checkKeyOutput(w io.Writer) error {
	if discarded(w) {
		return usageError{"keys create: standard output is /dev/null (or closed): the key, shown only once, would be lost; send it somewhere it can be read"}
	}
	return nil
}

// discarded reports whether w is the null device: a closed standard
// output is one too, reopened on /dev/null by the Go runtime at start.
func discarded(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	got, err := f.Stat()
	if err != nil {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err == nil && os.SameFile(got, null)
}

func listKeys(ctx context.Context, store *apikeys.Store, stdout io.Writer) error {
	list, err := store.List(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTIER\tADMIN\tPREFIX\tCREATED\tREVOKED")
	for _, k := range list {
		revoked := "-"
		if k.RevokedAt != nil {
			revoked = k.RevokedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%v\t%s…\t%s\t%s\n", k.ID, k.Name, k.Tier, k.Admin, k.Prefix,
			k.CreatedAt.UTC().Format(time.RFC3339), revoked)
	}
	return tw.Flush()
}

func keyTiers(cfg Config) []string {
	var out []string
	for name := range cfg.Throttle.Tiers {
		if name != toll.AnonymousTier {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
