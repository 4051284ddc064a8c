package modern

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func saramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V4_0_0_0
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Idempotent = true
	c.Net.MaxOpenRequests = 1
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.IsolationLevel = sarama.ReadCommitted
	return c
}

// groupHandler collects every record of its claims and marks it consumed.
type groupHandler struct {
	mu   sync.Mutex
	seen map[string]int
	last map[int32]int64 // partition -> the offset of the last record read
}

func (h *groupHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *groupHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		h.mu.Lock()
		h.seen[string(m.Value)]++
		if m.Offset > h.last[m.Partition] {
			h.last[m.Partition] = m.Offset
		}
		h.mu.Unlock()
		s.MarkMessage(m, "")
	}
	return nil
}

func (h *groupHandler) distinct() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

func TestSaramaIdempotentTransactionalProduceAndGroup(t *testing.T) {
	adm := adminClient(t)
	topic := createTopic(t, adm, "sarama", 3)
	// idempotent produce
	p, err := sarama.NewSyncProducer(bootstrap(t), saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(strconv.Itoa(i)),
			Value: sarama.StringEncoder("idem-" + strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	// a committed and an aborted transaction
	tc := saramaConfig()
	tc.Producer.Transaction.ID = unique("sarama-tid")
	tp, err := sarama.NewSyncProducer(bootstrap(t), tc)
	if err != nil {
		t.Fatal(err)
	}
	for round, commit := range []bool{true, false} {
		if err := tp.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10; i++ {
			v := "txn" + strconv.Itoa(round) + "-" + strconv.Itoa(i)
			if _, _, err := tp.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(v),
				Value: sarama.StringEncoder(v)}); err != nil {
				t.Fatal(err)
			}
		}
		if commit {
			err = tp.CommitTxn()
		} else {
			err = tp.AbortTxn()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	tp.Close()
	// a read_committed group sees the 30 + 10 committed records, never the aborted ones
	group := unique("sarama-g")
	cg, err := sarama.NewConsumerGroup(bootstrap(t), group, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	h := &groupHandler{seen: map[string]int{}, last: map[int32]int64{}}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for ctx.Err() == nil && h.distinct() < 40 {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // nothing more comes
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := cg.Close(); err != nil { // commits the marked offsets
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seen) != 40 {
		t.Fatalf("the group read %d distinct records, want 40", len(h.seen))
	}
	for v := range h.seen {
		if len(v) > 4 && v[:4] == "txn1" {
			t.Fatalf("aborted record %s read under read_committed", v)
		}
	}
	offs, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	// committed just past the last record read (sarama marks offset + 1)
	for part, last := range h.last {
		if o, ok := offs.Lookup(topic, part); !ok || o.At != last+1 {
			t.Errorf("partition %d: committed %+v, last record at %d", part, o, last)
		}
	}
	if len(h.last) != 3 {
		t.Errorf("records came from %d partitions, want 3", len(h.last))
	}
}
