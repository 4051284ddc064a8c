package modern

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func TestKafkaGoWriterAndGroupReader(t *testing.T) {
	adm := adminClient(t)
	topic := createTopic(t, adm, "kafkago", 2)
	ctx := ctxFor(t, 90*time.Second)
	w := &kafka.Writer{Addr: kafka.TCP(bootstrap(t)...), Topic: topic, RequiredAcks: kafka.RequireAll,
		Balancer: &kafka.Hash{}, BatchTimeout: 10 * time.Millisecond, Compression: kafka.Snappy}
	msgs := make([]kafka.Message, 50)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte(strconv.Itoa(i)), Value: []byte("v" + strconv.Itoa(i))}
	}
	// a broker's view of a new topic's leaders can lag its creation by one poll: kafka-go's
	// writer does not retry "no leader", so the messages that failed are written again
	pending := msgs
	for attempt := 0; len(pending) > 0; attempt++ {
		err := w.WriteMessages(ctx, pending...)
		if err == nil {
			break
		}
		werrs, ok := err.(kafka.WriteErrors)
		if !ok || attempt >= 20 {
			t.Fatal(err)
		}
		var again []kafka.Message
		for i, e := range werrs {
			if e != nil {
				again = append(again, pending[i])
			}
		}
		pending = again
		time.Sleep(200 * time.Millisecond)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	group := unique("kafkago-g")
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: bootstrap(t), GroupID: group, Topic: topic,
		StartOffset: kafka.FirstOffset, MaxWait: 200 * time.Millisecond})
	seen := map[string]bool{}
	for len(seen) < 50 {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("after %d records: %v", len(seen), err)
		}
		seen[string(m.Value)] = true
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for v := range seen {
		if !strings.HasPrefix(v, "v") {
			t.Fatalf("unexpected value %q", v)
		}
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, ps := range offs {
		for _, o := range ps {
			sum += o.At
		}
	}
	if sum != 50 {
		t.Fatalf("committed offsets sum to %d, want 50", sum)
	}
}
