package modern

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestKadmTopicsConfigsOffsetsGroupsTransactions(t *testing.T) {
	adm := adminClient(t)
	ctx := ctxFor(t, 90*time.Second)
	topic := createTopic(t, adm, "kadm", 2)
	// topics and partitions
	topics, err := adm.ListTopics(ctx)
	if err != nil || !topics.Has(topic) {
		t.Fatalf("ListTopics: %v, has %s: %v", err, topic, topics.Has(topic))
	}
	if _, err := adm.CreatePartitions(ctx, 1, topic); err != nil {
		t.Fatal(err)
	}
	// configs
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kadm.StringPtr("7200000")}}, topic); err != nil {
		t.Fatal(err)
	}
	rc, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rc.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, kv := range c.Configs {
		if kv.Key == "retention.ms" && kv.MaybeValue() == "7200000" {
			found = true
		}
	}
	if !found {
		t.Fatalf("retention.ms not altered: %v", c.Configs)
	}
	// records, offsets, deletion
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap(t)...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < 10; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != 10 {
		t.Fatalf("end offsets sum to %d, want 10", total)
	}
	var del kadm.Offsets
	del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 4})
	dr, err := adm.DeleteRecords(ctx, del)
	if err != nil || dr.Error() != nil {
		t.Fatalf("DeleteRecords: %v %v", err, dr.Error())
	}
	if r, _ := dr.Lookup(topic, 0); r.LowWatermark != 4 {
		t.Fatalf("DeleteRecords answered low watermark %d, want 4", r.LowWatermark)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := starts.Lookup(topic, 0); o.Offset != 4 {
		t.Fatalf("start offset %d after deleting records before 4", o.Offset)
	}
	// a group's offsets: commit, fetch, describe, delete
	group := unique("kadm-g")
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: topic, Partition: 0, At: 7, LeaderEpoch: -1})
	if r, err := adm.CommitOffsets(ctx, group, os); err != nil || r.Error() != nil {
		t.Fatalf("CommitOffsets: %v %v", err, r.Error())
	}
	fetched, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := fetched.Lookup(topic, 0); !ok || o.At != 7 {
		t.Fatalf("fetched %+v", o)
	}
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil || described[group].State != "Empty" {
		t.Fatalf("DescribeGroups: %v %+v", err, described[group])
	}
	if r, err := adm.DeleteGroups(ctx, group); err != nil || r.Error() != nil {
		t.Fatalf("DeleteGroups: %v %v", err, r.Error())
	}
	// transactions: an open one is listed, described, and its producer seen on the partition
	tid := unique("kadm-tid")
	tx, err := kgo.NewClient(kgo.SeedBrokers(bootstrap(t)...), kgo.DefaultProduceTopic(topic), kgo.TransactionalID(tid),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	listed, err := adm.ListTransactions(ctx, nil, []string{"Ongoing"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := listed[tid]; !ok {
		t.Fatalf("%s not listed as Ongoing: %v", tid, listed.TransactionalIDs())
	}
	dt, err := adm.DescribeTransactions(ctx, tid)
	if err != nil || dt[tid].State != "Ongoing" {
		t.Fatalf("DescribeTransactions: %v %+v", err, dt[tid])
	}
	prods, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {1: {}}})
	if err != nil {
		t.Fatal(err)
	}
	seen := false
	prods.EachProducer(func(p kadm.DescribedProducer) { seen = seen || p.ProducerID == dt[tid].ProducerID })
	if !seen {
		t.Fatalf("the transaction's producer %d is not on %s-1", dt[tid].ProducerID, topic)
	}
	if err := tx.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	// and the topic goes
	if r, err := adm.DeleteTopics(ctx, topic); err != nil || r.Error() != nil {
		t.Fatalf("DeleteTopics: %v %v", err, r.Error())
	}
}
