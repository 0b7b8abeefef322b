// Package apikeys stores API keys in PostgreSQL and keeps them in memory for
// the request path.
//
// A key is shown once, when it is created; the database holds only its
// SHA-256, a short prefix to recognise it by, a name and a tier. The server
// looks keys up in a Ring: an in-memory copy of the active keys, so no
// request waits on the database to learn who it is. The ring reloads when
// the database announces a change (LISTEN/NOTIFY on Channel, from a trigger
// on the keys table), so a new key works and a revoked one is refused on
// every server within moments; a periodic reload is the fallback when that
// connection is lost. Keys that could not be reloaded for too long are
// stale, and then grant no admin rights (see Ring.MaxAge).
package apikeys

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/pgcall"
	queries "github.com/geotoll/geotoll/sql"
)

// Key is one API key's record (never the key itself).
type Key struct {
	ID        int64
	Name      string
	Tier      string
	Admin     bool
	Prefix    string // first characters of the key
	CreatedAt time.Time
	RevokedAt *time.Time
}

// Hash is the SHA-256 of a key, the only form in which keys are stored.
type Hash [sha256.Size]byte

// HashOf returns the hash of key.
func HashOf(key string) Hash { return sha256.Sum256([]byte(key)) }

// keyPrefix marks geotoll keys, so leaked ones can be found by secret scanners.
const keyPrefix = "gt_"

// Marked reports whether s begins as every geotoll key does ("gt_"): a
// secret, wherever it is found (a log redacts it).
func Marked(s string) bool { return len(s) >= len(keyPrefix) && s[:len(keyPrefix)] == keyPrefix }

// HoldsMark reports whether s has the mark of a geotoll key anywhere in
// it: a key sent after a space, or glued to another word, is a secret
// too. A log hides such text whole.
func HoldsMark(s string) bool { return strings.Contains(s, keyPrefix) }

// RedactPath is a URL path for a log: each segment that holds the mark of
// a key is REDACTED (a URL template that puts "&key=" where "?key=" goes
// sends the key in the path).
func RedactPath(p string) string {
	if !HoldsMark(p) {
		return p
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if HoldsMark(s) {
			segs[i] = "REDACTED"
		}
	}
	return strings.Join(segs, "/")
}

// MaxKeyLength bounds what a client may present as a key; longer strings
// are malformed before they are hashed.
const MaxKeyLength = 128

// Generate returns a new random key: "gt_" and 32 random bytes, base64url.
func Generate() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return keyPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

var (
	validName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	validTier = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
)

// Errors of Store.
var (
	ErrNotFound = errors.New("apikeys: no such key")
	// ErrRevoked: every key of the name was revoked already (Revoke).
	ErrRevoked   = errors.New("apikeys: no active key has that name: revoked already")
	ErrNameTaken = errors.New("apikeys: an active key has that name")
	ErrInvalid   = errors.New("apikeys: invalid name or tier")
)

// Store reads and writes keys. Create and Revoke need the schema owner's
// pool; Active needs only SELECT (the read role has it). Reads are guarded
// calls (package pgcall): a bounded wait for a connection, a READ ONLY
// transaction under a 5 s statement timeout.
type Store struct {
	pool *pgxpool.Pool
	db   pgcall.DB
}

// readTimeout is the statement_timeout of a key read.
const readTimeout = 5 * time.Second

// NewStore returns a Store over pool.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, db: pgcall.DB{Pool: pool, AcquireTimeout: readTimeout}}
}

// Create makes a key for name in tier and returns the key — the only time it
// is ever seen — with its record. A name is taken (ErrNameTaken) while a key
// of that name is active; once it is revoked the name is free again.
func (s *Store) Create(ctx context.Context, name, tier string, admin bool) (string, Key, error) {
	if !validName.MatchString(name) || !validTier.MatchString(tier) {
		return "", Key{}, fmt.Errorf("%w: name must match %s, tier %s", ErrInvalid, validName, validTier)
	}
	plain, err := Generate()
	if err != nil {
		return "", Key{}, err
	}
	h := HashOf(plain)
	k := Key{Name: name, Tier: tier, Admin: admin, Prefix: plain[:len(keyPrefix)+6]}
	err = s.pool.QueryRow(ctx, `INSERT INTO geotoll.api_keys (name, tier, key_hash, key_prefix, admin)
VALUES ($1, $2, $3, $4, $5) RETURNING id, created_at`, name, tier, h[:], k.Prefix, admin).Scan(&k.ID, &k.CreatedAt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return "", Key{}, ErrNameTaken
	}
	if err != nil {
		return "", Key{}, err
	}
	return plain, k, nil
}

// List returns every key, revoked ones included, oldest first.
func (s *Store) List(ctx context.Context) ([]Key, error) {
	var out []Key
	_, err := s.db.Read(ctx, pgcall.Statement{SQL: listSQL, Timeout: readTimeout, Scan: func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Key, error) {
			var k Key
			err := row.Scan(&k.ID, &k.Name, &k.Tier, &k.Admin, &k.Prefix, &k.CreatedAt, &k.RevokedAt)
			return k, err
		})
		return err
	}})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Revoke marks the named key revoked (the one active key of that name; the
// revoked ones stay as they were). A name whose keys were all revoked
// already is ErrRevoked, so that a caller can tell it from a revocation;
// an unknown name is ErrNotFound.
func (s *Store) Revoke(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE geotoll.api_keys SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL`, name)
	if err != nil || tag.RowsAffected() > 0 {
		return err
	}
	var known bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM geotoll.api_keys WHERE name = $1)`, name).Scan(&known); err != nil {
		return err
	}
	if known {
		return ErrRevoked
	}
	return ErrNotFound
}

// RevokeID marks the key of id revoked, if it is active: the one key a
// caller created, whatever was since done under its name.
func (s *Store) RevokeID(ctx context.Context, id int64) error {
	_, err := s.pool.Exec(ctx, `UPDATE geotoll.api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL`, id)
	return err
}

// ValidName reports whether name has the form of a key's name (Create
// refuses any other), so that a caller can check it before connecting.
func ValidName(name string) bool { return validName.MatchString(name) }

var (
	activeSQL = queries.MustRead("api_keys_active.sql")
	listSQL   = queries.MustRead("api_keys_list.sql")
)

// Active returns the keys that are not revoked, by hash.
func (s *Store) Active(ctx context.Context) (map[Hash]Key, error) {
	out := make(map[Hash]Key)
	_, err := s.db.Read(ctx, pgcall.Statement{SQL: activeSQL, Timeout: readTimeout, Scan: func(rows pgx.Rows) error {
		var (
			k    Key
			hash []byte
		)
		_, err := pgx.ForEachRow(rows, []any{&k.ID, &k.Name, &k.Tier, &hash, &k.Admin}, func() error {
			if len(hash) != len(Hash{}) {
				return fmt.Errorf("apikeys: key %q has a %d-byte hash", k.Name, len(hash))
			}
			out[Hash(hash)] = k
			return nil
		})
		return err
	}})
	if err != nil {
		return nil, err
	}
	return out, nil
}
