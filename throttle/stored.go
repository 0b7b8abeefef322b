package throttle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Stored reads a bucket as Redis holds it, without admit.lua and without
// refilling it to now: its tokens as last written and the requests it
// holds open. found is false for a missing bucket (a full one). It is for
// operators and tests looking at Redis, never for decisions.
func Stored(ctx context.Context, rdb redis.Cmdable, key string) (tokens float64, open int, found bool, err error) {
	raw, err := rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	fields := strings.Fields(raw)
	if len(fields) != 7 && len(fields) != 9 { // 9: with the tokens out on leases (admit.lua's KEYS[1])
		return 0, 0, false, fmt.Errorf("throttle: bucket %q holds %q", key, raw)
	}
	u, err1 := strconv.ParseFloat(fields[0], 64)
	n, err2 := strconv.Atoi(fields[5])
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, false, fmt.Errorf("throttle: bucket %q holds %q: %w", key, raw, err)
	}
	return fromMicro(u), n, true, nil
}
