// Package modern drives kaas with Go clients from the module proxy (franz-go, kadm,
// IBM/sarama, segmentio/kafka-go) — tests/integration/test_go_modern.py runs `go test`
// here with KAAS_BOOTSTRAP naming a running cluster.
package modern

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func bootstrap(t *testing.T) []string {
	t.Helper()
	b := os.Getenv("KAAS_BOOTSTRAP")
	if b == "" {
		t.Skip("KAAS_BOOTSTRAP is not set: start a cluster (make cluster) and name its brokers")
	}
	return strings.Split(b, ",")
}

func unique(prefix string) string {
	return fmt.Sprintf("%s-%08x", prefix, rand.Uint32())
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func adminClient(t *testing.T) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap(t)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// createTopic makes a topic of n partitions and waits until each has a leader.
func createTopic(t *testing.T, adm *kadm.Client, prefix string, n int32) string {
	t.Helper()
	name := unique(prefix)
	ctx := ctxFor(t, 60*time.Second)
	resp, err := adm.CreateTopic(ctx, n, -1, nil, name)
	if err != nil || resp.Err != nil {
		t.Fatalf("create %s: %v %v", name, err, resp.Err)
	}
	for {
		md, err := adm.Metadata(ctx, name)
		if err == nil {
			td := md.Topics[name]
			ok := td.Err == nil && len(td.Partitions) == int(n)
			for _, p := range td.Partitions {
				ok = ok && p.Leader >= 0 && p.Err == nil
			}
			if ok {
				return name
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no leaders for %s", name)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// readAll consumes every partition of topic from the start until want records came
// (then 500 ms more, to see any extra), with the given isolation.
func readAll(t *testing.T, topic string, want int, committed bool) []*kgo.Record {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(bootstrap(t)...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	deadline := time.Now().Add(30 * time.Second)
	extra := time.Time{}
	for time.Now().Before(deadline) {
		if len(out) >= want && extra.IsZero() {
			extra = time.Now().Add(500 * time.Millisecond)
		}
		if !extra.IsZero() && time.Now().After(extra) {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}
