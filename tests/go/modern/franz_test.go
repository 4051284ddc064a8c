package modern

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestFranzIdempotentProduceKeepsOrder(t *testing.T) {
	adm := adminClient(t)
	topic := createTopic(t, adm, "franz-idem", 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap(t)...), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := ctxFor(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for i := 0; i < 1000; i++ {
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := readAll(t, topic, 1000, false)
	if len(got) != 1000 {
		t.Fatalf("read %d records, want 1000", len(got))
	}
	for i, r := range got {
		if string(r.Value) != strconv.Itoa(i) || r.Offset != int64(i) {
			t.Fatalf("record %d: value %s offset %d", i, r.Value, r.Offset)
		}
		if i == 0 && r.ProducerID < 0 {
			t.Fatalf("not idempotent: producer id %d", r.ProducerID)
		}
	}
}

func TestFranzTransactionsCommitAndAbort(t *testing.T) {
	adm := adminClient(t)
	topic := createTopic(t, adm, "franz-txn", 2)
	tid := unique("franz-tid")
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap(t)...), kgo.DefaultProduceTopic(topic),
		kgo.TransactionalID(tid))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := ctxFor(t, 60*time.Second)
	for round, commit := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort, kgo.TryCommit} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10; i++ {
			v := strconv.Itoa(round) + "-" + strconv.Itoa(i)
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	committed := readAll(t, topic, 20, true)
	if len(committed) != 20 {
		t.Fatalf("read_committed saw %d, want 20", len(committed))
	}
	for _, r := range committed {
		if r.Value[0] == '1' {
			t.Fatalf("aborted record %s visible to read_committed", r.Value)
		}
	}
	if all := readAll(t, topic, 30, false); len(all) != 30 {
		t.Fatalf("read_uncommitted saw %d, want 30", len(all))
	}
	// the transaction, as the coordinator describes it
	d, err := adm.DescribeTransactions(ctx, tid)
	if err != nil {
		t.Fatal(err)
	}
	if st := d[tid].State; st != "CompleteCommit" {
		t.Fatalf("%s is %q, want CompleteCommit", tid, st)
	}
}

func TestFranzGroupTransactSessionCopiesExactlyOnce(t *testing.T) {
	adm := adminClient(t)
	in := createTopic(t, adm, "franz-eos-in", 2)
	out := createTopic(t, adm, "franz-eos-out", 2)
	group := unique("franz-eos-g")
	const n = 200
	p, err := kgo.NewClient(kgo.SeedBrokers(bootstrap(t)...), kgo.DefaultProduceTopic(in))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 120*time.Second)
	for i := 0; i < n; i++ {
		if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	// two sessions share the input; each copy is committed with its offsets
	var mu sync.Mutex
	copied := 0
	var wg sync.WaitGroup
	for s := 0; s < 2; s++ {
		sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(bootstrap(t)...), kgo.DefaultProduceTopic(out),
			kgo.TransactionalID(unique("franz-eos-tid")), kgo.ConsumerGroup(group), kgo.ConsumeTopics(in),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RequireStableFetchOffsets(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sess.Close()
			for {
				mu.Lock()
				done := copied >= n
				mu.Unlock()
				if done || ctx.Err() != nil {
					return
				}
				pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				fs := sess.PollFetches(pctx)
				cancel()
				if fs.Empty() {
					continue
				}
				if err := sess.Begin(); err != nil {
					t.Error(err)
					return
				}
				var recs []*kgo.Record
				fs.EachRecord(func(r *kgo.Record) {
					recs = append(recs, &kgo.Record{Value: append([]byte("copy-"), r.Value...), Partition: r.Partition})
				})
				if err := sess.ProduceSync(ctx, recs...).FirstErr(); err != nil {
					t.Error(err)
				}
				ok, err := sess.End(ctx, kgo.TryCommit)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					copied += len(recs)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	got := readAll(t, out, n, true)
	seen := map[string]int{}
	for _, r := range got {
		seen[string(r.Value)]++
	}
	if len(got) != n || len(seen) != n {
		t.Fatalf("copied %d records, %d distinct; want %d once each", len(got), len(seen), n)
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
	if sum != n {
		t.Fatalf("the group's committed offsets sum to %d, want %d", sum, n)
	}
}

// consumeInGroup runs two members of one group, each committing what it polled, until
// they read n distinct records together and the group's committed offsets sum to n.
func consumeInGroup(t *testing.T, adm *kadm.Client, topic, group string, n int, opts ...kgo.Opt) map[string]int {
	t.Helper()
	ctx := ctxFor(t, 90*time.Second)
	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		base := []kgo.Opt{kgo.SeedBrokers(bootstrap(t)...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit()}
		cl, err := kgo.NewClient(append(base, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			for stop.Err() == nil {
				pctx, pcancel := context.WithTimeout(stop, 300*time.Millisecond)
				fs := cl.PollFetches(pctx)
				pcancel()
				mu.Lock()
				fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
				mu.Unlock()
				// a commit refused while the group rebalances is retried after the next poll
				_ = cl.CommitUncommittedOffsets(stop)
			}
		}()
	}
	for ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		distinct := len(seen)
		mu.Unlock()
		if distinct < n {
			continue
		}
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			continue
		}
		var sum int64
		offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
		if sum == int64(n) {
			break
		}
	}
	cancel()
	wg.Wait()
	return seen
}

func testFranzGroup(t *testing.T, opts ...kgo.Opt) string {
	adm := adminClient(t)
	topic := createTopic(t, adm, "franz-group", 4)
	group := unique("franz-g")
	p, err := kgo.NewClient(kgo.SeedBrokers(bootstrap(t)...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 90*time.Second)
	for i := 0; i < 100; i++ {
		k := []byte(strconv.Itoa(i)) // keyed: spread over the 4 partitions
		if err := p.ProduceSync(ctx, &kgo.Record{Key: k, Value: k}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	seen := consumeInGroup(t, adm, topic, group, 100, opts...)
	if len(seen) != 100 {
		t.Fatalf("the group read %d distinct records, want 100", len(seen))
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
	if sum != 100 {
		t.Fatalf("committed offsets sum to %d, want 100", sum)
	}
	return group
}

func TestFranzClassicConsumerGroup(t *testing.T) {
	group := testFranzGroup(t, kgo.Balancers(kgo.CooperativeStickyBalancer()))
	listed, err := adminClient(t).ListGroupsByType(ctxFor(t, 30*time.Second), []string{"classic"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := listed[group]; !ok {
		t.Fatalf("%s is not a classic group: %v", group, listed.Groups())
	}
}

func TestFranzConsumerProtocolGroup(t *testing.T) {
	// KIP-848: the broker assigns (franz-go takes the range or sticky balancer as the assignor)
	group := testFranzGroup(t, kgo.Balancers(kgo.RangeBalancer()), kgo.ServerSideBalancer())
	listed, err := adminClient(t).ListGroupsByType(ctxFor(t, 30*time.Second), []string{"consumer"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := listed[group]; !ok {
		t.Fatalf("%s is not a consumer-protocol group: %v", group, listed.Groups())
	}
}
