// sarama_check: Sarama (Debian's 1.22) against a kaas cluster (issue 31).
//
// Creates TOPIC (3 partitions), produces 30 records idempotently with explicit
// timestamps (several records per batch: Sarama sends each batch with
// MaxTimestamp -1), reads them back in consumer group GROUP with read_committed,
// checks the group's committed offsets, then asks ListOffsets by timestamp
// (offsets-for-times) for every record's timestamp, for a time just before it,
// and for a time after the last record. Any mismatch is printed and the exit
// status is 1; on success one JSON line is printed.
//
// Usage: sarama_check BOOTSTRAP TOPIC GROUP
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

const (
	nMsgs  = 30
	nParts = 3
)

var problems []string

func fatal(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "sarama_check: FAIL: "+format+"\n", a...)
	os.Exit(1)
}

func mismatch(format string, a ...interface{}) {
	problems = append(problems, fmt.Sprintf(format, a...))
}

type sent struct {
	partition int32
	offset    int64
	key       string
	value     string
	tsMs      int64
}

type got struct {
	partition int32
	offset    int64
	key       string
	value     string
	tsMs      int64
}

type handler struct {
	mu   sync.Mutex
	msgs []got
	done chan struct{}
	once sync.Once
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *handler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		h.mu.Lock()
		h.msgs = append(h.msgs, got{m.Partition, m.Offset, string(m.Key), string(m.Value), m.Timestamp.UnixNano() / 1e6})
		n := len(h.msgs)
		h.mu.Unlock()
		sess.MarkMessage(m, "")
		if n >= nMsgs {
			h.once.Do(func() { close(h.done) })
		}
	}
	return nil
}

func config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "kaas-sarama-check"
	cfg.Version = sarama.V2_1_0_0
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Retry.Max = 5
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	// several records per batch, so that offsets-for-times must answer within a batch
	cfg.Producer.Flush.Messages = 5
	cfg.Producer.Flush.Frequency = 100 * time.Millisecond
	cfg.Net.MaxOpenRequests = 1
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.CommitInterval = 200 * time.Millisecond
	// Sarama 1.22 commits with OffsetCommit v1 unless a retention is set (then v2).
	// Kafka 4 removed v0-v1 (KIP-896) and so does kaas: the connection is closed and
	// nothing is committed, exactly as with an Apache 4 broker.
	cfg.Consumer.Offsets.Retention = 24 * time.Hour
	cfg.Consumer.Return.Errors = true
	cfg.Metadata.Retry.Max = 10
	cfg.Metadata.Retry.Backoff = 200 * time.Millisecond
	return cfg
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: sarama_check BOOTSTRAP TOPIC GROUP")
		os.Exit(2)
	}
	brokers, topic, group := strings.Split(os.Args[1], ","), os.Args[2], os.Args[3]
	cfg := config()

	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	if err != nil {
		fatal("cluster admin: %v", err)
	}
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: nParts, ReplicationFactor: 1}, false); err != nil {
		fatal("CreateTopic %s: %v", topic, err)
	}

	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		fatal("client: %v", err)
	}
	defer client.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		parts, err := client.Partitions(topic)
		if err == nil && len(parts) == nParts {
			break
		}
		if time.Now().After(deadline) {
			fatal("topic %s not in metadata with %d partitions: %v %v", topic, nParts, parts, err)
		}
		time.Sleep(200 * time.Millisecond)
		client.RefreshMetadata(topic)
	}

	// produce: one call, so that the records of a partition share batches
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		fatal("producer: %v", err)
	}
	base := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	msgs := make([]*sarama.ProducerMessage, nMsgs)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{
			Topic: topic, Partition: int32(i % nParts),
			Key:       sarama.StringEncoder(fmt.Sprintf("k%d", i)),
			Value:     sarama.StringEncoder(fmt.Sprintf("v%d", i)),
			Timestamp: base.Add(time.Duration(i) * time.Second),
		}
	}
	if err := producer.SendMessages(msgs); err != nil {
		fatal("SendMessages: %v", err)
	}
	if err := producer.Close(); err != nil {
		fatal("producer close: %v", err)
	}
	produced := make([]sent, nMsgs)
	perPart := map[int32]int64{}
	for i, m := range msgs {
		produced[i] = sent{m.Partition, m.Offset, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i), base.Add(time.Duration(i)*time.Second).UnixNano() / 1e6}
		if m.Offset != perPart[m.Partition] {
			mismatch("produce: record %d got offset %d on partition %d, want %d", i, m.Offset, m.Partition, perPart[m.Partition])
		}
		perPart[m.Partition]++
	}

	// consume in a group, read_committed
	cg, err := sarama.NewConsumerGroup(brokers, group, cfg)
	if err != nil {
		fatal("consumer group: %v", err)
	}
	h := &handler{done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "sarama_check: Consume: %v\n", err)
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	go func() {
		for err := range cg.Errors() {
			fmt.Fprintf(os.Stderr, "sarama_check: consumer group error: %v\n", err)
		}
	}()
	select {
	case <-h.done:
	case <-time.After(60 * time.Second):
		h.mu.Lock()
		n := len(h.msgs)
		h.mu.Unlock()
		cancel()
		fatal("consumer group read %d of %d records in 60 s", n, nMsgs)
	}
	time.Sleep(500 * time.Millisecond) // one commit interval more
	cancel()
	wg.Wait()
	if err := cg.Close(); err != nil {
		fatal("consumer group close: %v", err)
	}
	h.mu.Lock()
	consumed := append([]got(nil), h.msgs...)
	h.mu.Unlock()
	sort.Slice(consumed, func(a, b int) bool {
		if consumed[a].partition != consumed[b].partition {
			return consumed[a].partition < consumed[b].partition
		}
		return consumed[a].offset < consumed[b].offset
	})
	want := append([]sent(nil), produced...)
	sort.Slice(want, func(a, b int) bool {
		if want[a].partition != want[b].partition {
			return want[a].partition < want[b].partition
		}
		return want[a].offset < want[b].offset
	})
	if len(consumed) != len(want) {
		mismatch("consume: read %d records, want %d", len(consumed), len(want))
	} else {
		for i := range want {
			w, c := want[i], consumed[i]
			if w.partition != c.partition || w.offset != c.offset || w.key != c.key || w.value != c.value || w.tsMs != c.tsMs {
				mismatch("consume: read %+v, want %+v", c, w)
			}
		}
	}

	// the group's committed offsets: the end of each partition
	parts := []int32{0, 1, 2}
	var commits map[int32]int64
	deadline = time.Now().Add(10 * time.Second)
	for {
		commits = map[int32]int64{}
		resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
		if err != nil {
			fatal("ListConsumerGroupOffsets: %v", err)
		}
		ok := true
		for _, p := range parts {
			b := resp.GetBlock(topic, p)
			if b == nil {
				ok = false
				continue
			}
			commits[p] = b.Offset
			ok = ok && b.Offset == perPart[p]
		}
		if ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, p := range parts {
		if commits[p] != perPart[p] {
			mismatch("committed offset of partition %d is %d, want %d", p, commits[p], perPart[p])
		}
	}
	admin.Close()

	// offsets-for-times (ListOffsets by timestamp): the first record whose timestamp is at least T
	checked := 0
	for _, s := range produced {
		for _, t := range []int64{s.tsMs, s.tsMs - 500} {
			off, err := client.GetOffset(topic, s.partition, t)
			checked++
			if err != nil {
				mismatch("offsets-for-times: partition %d time %d: %v", s.partition, t, err)
			} else if off != s.offset {
				mismatch("offsets-for-times: partition %d time %d (record %s at %d) answered offset %d, want %d", s.partition, t, s.value, s.tsMs, off, s.offset)
			}
		}
	}
	after := base.Add(time.Hour).UnixNano() / 1e6
	for _, p := range parts {
		off, err := client.GetOffset(topic, p, after)
		checked++
		if err != nil || off != -1 {
			mismatch("offsets-for-times: partition %d time %d (after every record) answered %d (%v), want -1", p, after, off, err)
		}
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil || end != perPart[p] {
			mismatch("ListOffsets latest: partition %d answered %d (%v), want %d", p, end, err, perPart[p])
		}
	}

	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "sarama_check: FAIL: "+p)
		}
		fmt.Fprintf(os.Stderr, "sarama_check: %d mismatches\n", len(problems))
		os.Exit(1)
	}
	out, _ := json.Marshal(map[string]interface{}{
		"client": "sarama", "topic": topic, "group": group, "produced": len(produced),
		"consumed": len(consumed), "offsets_for_times_checked": checked, "ok": true,
	})
	fmt.Println(string(out))
}
