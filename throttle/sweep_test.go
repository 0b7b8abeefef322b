package throttle

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestScriptSweepsOnceACall: at the in-flight cap the script sweeps the
// caller's open requests (HGETALL of the whole hash) once a call, not once
// an admit: the clock stands still within a call, so a second sweep could
// find nothing the first left, and a batch of a caller at its cap would
// read the hash once per admit. The commands the script ran on the
// caller's open hash are read from MONITOR on the key's node.
func TestScriptSweepsOnceACall(t *testing.T) {
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("sweep-once")
		sh := shape{rate: micro, capacity: 100 * micro, max: 2, ttlMS: 60000}
		f.run(key, sh, []op{{kind: opAdmit, id: "a", amount: micro}, {kind: opAdmit, id: "b", amount: micro}})
		var batch []op
		for i := range 20 {
			batch = append(batch, op{kind: opAdmit, id: fmt.Sprint("x", i), amount: micro})
		}
		var got []opResult
		cmds := monitored(t, f, key, func() { got = f.run(key, sh, batch) })
		for i, r := range got {
			if r.status != stInFlight {
				t.Fatalf("admit %d of a caller at its cap of 2, both live: status %d", i, r.status)
			}
		}
		if n := strings.Count(cmds, `"HGETALL" "`+OpenKey(key)+`"`); n != 1 {
			t.Errorf("%d sweeps of the open hash in one call of 20 admits at the cap, want 1; the script ran:\n%s", n, cmds)
		}
	})
}

// monitored runs fn and answers the commands Redis ran on key's node
// meanwhile that name key's hash tag (MONITOR's lines, the script's own
// calls among them).
func monitored(t *testing.T, f *redisFixture, key string, fn func()) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var node *redis.Client
	switch c := f.rdb.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		var err error
		if node, err = c.MasterForKey(ctx, key); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("a client of type %T", f.rdb)
	}
	conn, err := net.DialTimeout("tcp", node.Options().Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := rd.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("MONITOR: %q, %v", line, err)
	}
	fn()
	marker := fmt.Sprintf("monitored-%d", time.Now().UnixNano())
	if err := node.Echo(ctx, marker).Err(); err != nil {
		t.Fatal(err)
	}
	tag := key[strings.Index(key, "{"):]
	var b strings.Builder
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reading MONITOR: %v (so far:\n%s)", err, b.String())
		}
		if strings.Contains(line, marker) {
			return b.String()
		}
		if strings.Contains(line, tag) {
			b.WriteString(line)
		}
	}
}
