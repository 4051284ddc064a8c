// confluent_check: confluent-kafka-go (Debian's 0.11, over its librdkafka 2.0)
// against a kaas cluster (issue 31).
//
// Creates TOPIC (3 partitions) with the AdminClient, produces 30 records with
// enable.idempotence and explicit timestamps (linger.ms, so several records per
// batch), reads them back in consumer group GROUP with
// isolation.level=read_committed, commits and checks the committed offsets, then
// asks OffsetsForTimes (ListOffsets by timestamp) for every record's timestamp,
// for a time just before it, and for a time after the last record. Any mismatch
// is printed and the exit status is 1; on success one JSON line is printed.
//
// Usage: confluent_check BOOTSTRAP TOPIC GROUP
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/confluentinc/confluent-kafka-go/kafka"
)

const (
	nMsgs  = 30
	nParts = 3
)

var problems []string

func fatal(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "confluent_check: FAIL: "+format+"\n", a...)
	os.Exit(1)
}

func mismatch(format string, a ...interface{}) {
	problems = append(problems, fmt.Sprintf(format, a...))
}

type rec struct {
	partition int32
	offset    int64
	key       string
	value     string
	tsMs      int64
}

func byPartitionOffset(rs []rec) {
	sort.Slice(rs, func(a, b int) bool {
		if rs[a].partition != rs[b].partition {
			return rs[a].partition < rs[b].partition
		}
		return rs[a].offset < rs[b].offset
	})
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: confluent_check BOOTSTRAP TOPIC GROUP")
		os.Exit(2)
	}
	bootstrap, topic, group := os.Args[1], os.Args[2], os.Args[3]

	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": bootstrap})
	if err != nil {
		fatal("admin client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	res, err := admin.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: topic, NumPartitions: nParts, ReplicationFactor: 1}},
		kafka.SetAdminOperationTimeout(15*time.Second))
	cancel()
	if err != nil {
		fatal("CreateTopics: %v", err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			fatal("CreateTopics %s: %v", r.Topic, r.Error)
		}
	}
	admin.Close()

	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers":  bootstrap,
		"client.id":          "kaas-confluent-check",
		"enable.idempotence": true,
		"acks":               "all",
		"linger.ms":          50, // several records per batch
	})
	if err != nil {
		fatal("producer: %v", err)
	}
	base := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	dr := make(chan kafka.Event, nMsgs)
	for i := 0; i < nMsgs; i++ {
		part := int32(i % nParts)
		err := p.Produce(&kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: part},
			Key:            []byte(fmt.Sprintf("k%d", i)),
			Value:          []byte(fmt.Sprintf("v%d", i)),
			Timestamp:      base.Add(time.Duration(i) * time.Second),
		}, dr)
		if err != nil {
			fatal("Produce record %d: %v", i, err)
		}
	}
	produced := make([]rec, 0, nMsgs)
	timeout := time.After(60 * time.Second)
	for len(produced) < nMsgs {
		select {
		case ev := <-dr:
			m := ev.(*kafka.Message)
			if m.TopicPartition.Error != nil {
				fatal("delivery of %s: %v", m.Value, m.TopicPartition.Error)
			}
			produced = append(produced, rec{m.TopicPartition.Partition, int64(m.TopicPartition.Offset), string(m.Key),
				string(m.Value), m.Timestamp.UnixNano() / 1e6})
		case <-timeout:
			fatal("%d of %d delivery reports in 60 s", len(produced), nMsgs)
		}
	}
	p.Close()
	byPartitionOffset(produced)
	perPart := map[int32]int64{}
	for _, r := range produced {
		if r.offset != perPart[r.partition] {
			mismatch("produce: %s got offset %d on partition %d, want %d", r.value, r.offset, r.partition, perPart[r.partition])
		}
		perPart[r.partition]++
	}
	// The timestamps sent. confluent-kafka-go 0.11 leaves a delivery report's timestamp
	// unset (its newMessageFromC "does not set message timestamp fields"), so the record
	// timestamps are checked where the consumer reads them back (CreateTime: as sent).
	for i := range produced {
		var n int
		fmt.Sscanf(produced[i].value, "v%d", &n)
		produced[i].tsMs = base.Add(time.Duration(n)*time.Second).UnixNano() / 1e6
	}

	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":  bootstrap,
		"group.id":           group,
		"isolation.level":    "read_committed",
		"auto.offset.reset":  "earliest",
		"enable.auto.commit": false,
	})
	if err != nil {
		fatal("consumer: %v", err)
	}
	if err := c.Subscribe(topic, nil); err != nil {
		fatal("Subscribe: %v", err)
	}
	consumed := make([]rec, 0, nMsgs)
	deadline := time.Now().Add(60 * time.Second)
	for len(consumed) < nMsgs && time.Now().Before(deadline) {
		switch ev := c.Poll(200).(type) {
		case *kafka.Message:
			if ev.TopicPartition.Error != nil {
				fatal("consume: %v", ev.TopicPartition.Error)
			}
			consumed = append(consumed, rec{ev.TopicPartition.Partition, int64(ev.TopicPartition.Offset), string(ev.Key),
				string(ev.Value), ev.Timestamp.UnixNano() / 1e6})
		case kafka.Error:
			fmt.Fprintf(os.Stderr, "confluent_check: consumer error: %v\n", ev)
		}
	}
	if len(consumed) < nMsgs {
		fatal("consumer group read %d of %d records in 60 s", len(consumed), nMsgs)
	}
	if _, err := c.Commit(); err != nil {
		fatal("Commit: %v", err)
	}
	byPartitionOffset(consumed)
	for i := range produced {
		if produced[i] != consumed[i] {
			mismatch("consume: read %+v, want %+v", consumed[i], produced[i])
		}
	}
	tps := make([]kafka.TopicPartition, nParts)
	for i := range tps {
		tps[i] = kafka.TopicPartition{Topic: &topic, Partition: int32(i)}
	}
	committed, err := c.Committed(tps, 10000)
	if err != nil {
		fatal("Committed: %v", err)
	}
	for _, tp := range committed {
		if int64(tp.Offset) != perPart[tp.Partition] {
			mismatch("committed offset of partition %d is %v, want %d", tp.Partition, tp.Offset, perPart[tp.Partition])
		}
	}

	// offsets-for-times (ListOffsets by timestamp): the first record whose timestamp is at least T
	checked := 0
	for _, r := range produced {
		for _, t := range []int64{r.tsMs, r.tsMs - 500} {
			q := []kafka.TopicPartition{{Topic: &topic, Partition: r.partition, Offset: kafka.Offset(t)}}
			ans, err := c.OffsetsForTimes(q, 10000)
			checked++
			if err != nil || len(ans) != 1 || ans[0].Error != nil {
				mismatch("offsets-for-times: partition %d time %d: %v %v", r.partition, t, err, ans)
			} else if int64(ans[0].Offset) != r.offset {
				mismatch("offsets-for-times: partition %d time %d (record %s at %d) answered offset %v, want %d",
					r.partition, t, r.value, r.tsMs, ans[0].Offset, r.offset)
			}
		}
	}
	after := base.Add(time.Hour).UnixNano() / 1e6
	for p := int32(0); p < nParts; p++ {
		q := []kafka.TopicPartition{{Topic: &topic, Partition: p, Offset: kafka.Offset(after)}}
		ans, err := c.OffsetsForTimes(q, 10000)
		checked++
		// no record at or after the time: Apache answers offset -1, which librdkafka reports as OffsetEnd
		if err != nil || len(ans) != 1 || ans[0].Error != nil || ans[0].Offset != kafka.OffsetEnd {
			mismatch("offsets-for-times: partition %d time %d (after every record) answered %v (%v), want END", p, after, ans, err)
		}
		low, high, err := c.QueryWatermarkOffsets(topic, p, 10000)
		if err != nil || low != 0 || high != perPart[p] {
			mismatch("watermarks of partition %d: %d..%d (%v), want 0..%d", p, low, high, err, perPart[p])
		}
	}
	c.Close()

	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "confluent_check: FAIL: "+p)
		}
		fmt.Fprintf(os.Stderr, "confluent_check: %d mismatches\n", len(problems))
		os.Exit(1)
	}
	_, librdkafka := kafka.LibraryVersion()
	out, _ := json.Marshal(map[string]interface{}{
		"client": "confluent-kafka-go", "librdkafka": librdkafka, "topic": topic, "group": group,
		"produced": len(produced), "consumed": len(consumed), "offsets_for_times_checked": checked, "ok": true,
	})
	fmt.Println(string(out))
}
