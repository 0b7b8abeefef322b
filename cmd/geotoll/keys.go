package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/toll"
)

const keysUsage = `usage:
  geotoll keys create -name NAME -tier TIER [-admin]   print a new key (shown once); a name is
                                                       free again once its key is revoked
  geotoll keys list                                    every key, revoked ones too
  geotoll keys revoke -name NAME                       stop a key (within throttle.key_refresh)
`

// keys runs `geotoll keys …` against the admin (schema owner) database.
func keys(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, keysUsage)
		return errors.New("keys: no subcommand")
	}
	fs := flag.NewFlagSet("keys "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "key name ([A-Za-z0-9_.-], unique among active keys)")
	tier := fs.String("tier", "", "tier, one of throttle.tiers")
	admin := fs.Bool("admin", false, "may administer geofences")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	pool, err := adminPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := apikeys.NewStore(pool)
	switch args[0] {
	case "create":
		if *name == "" || *tier == "" {
			return errors.New("keys create: -name and -tier are required")
		}
		if _, ok := cfg.Throttle.Tiers[*tier]; !ok || *tier == toll.AnonymousTier {
			return fmt.Errorf("keys create: tier %q is not one of the configured key tiers: %s", *tier, strings.Join(keyTiers(cfg), ", "))
		}
		plain, k, err := store.Create(ctx, *name, *tier, *admin)
		if errors.Is(err, apikeys.ErrNameTaken) {
			return fmt.Errorf("keys create: a key named %q is active; to rotate it, revoke it first (geotoll keys revoke -name %s: the name is free again once revoked), or pick another name", *name, *name)
		}
		if err != nil {
			return fmt.Errorf("keys create: %w", err)
		}
		fmt.Fprintln(stdout, plain)
		fmt.Fprintf(stderr, "created key %q (tier %s, id %d). It is shown only now: store it safely.\n", k.Name, k.Tier, k.ID)
		return nil
	case "list":
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
	case "revoke":
		if *name == "" {
			return errors.New("keys revoke: -name is required")
		}
		if err := store.Revoke(ctx, *name); err != nil {
			return fmt.Errorf("keys revoke: %w", err)
		}
		fmt.Fprintf(stderr, "revoked %q; running servers refuse it at once (notified by the database; at the latest within %s)\n", *name, cfg.Throttle.KeyRefresh)
		return nil
	}
	fmt.Fprint(stderr, keysUsage)
	return fmt.Errorf("keys: unknown subcommand %q", args[0])
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
