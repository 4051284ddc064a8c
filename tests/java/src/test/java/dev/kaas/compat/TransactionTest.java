package dev.kaas.compat;

import static dev.kaas.compat.Clients.consumer;
import static dev.kaas.compat.Clients.createTopic;
import static dev.kaas.compat.Clients.pollFor;
import static dev.kaas.compat.Clients.pollN;
import static dev.kaas.compat.Clients.producer;
import static dev.kaas.compat.Clients.unique;
import static dev.kaas.compat.Clients.values;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

class TransactionTest extends OnKaas {
  static KafkaProducer<String, String> txProducer(String tid, Object... kv) {
    Object[] base = {ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid, ProducerConfig.ACKS_CONFIG, "all"};
    Object[] all = new Object[base.length + kv.length];
    System.arraycopy(base, 0, all, 0, base.length);
    System.arraycopy(kv, 0, all, base.length, kv.length);
    return producer(kaas, all);
  }

  static List<ConsumerRecord<String, String>> read(String topic, int partitions, String isolation, int expect) {
    try (KafkaConsumer<String, String> k =
        consumer(kaas, null, ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation)) {
      List<TopicPartition> tps =
          IntStream.range(0, partitions).mapToObj(p -> new TopicPartition(topic, p)).toList();
      k.assign(tps);
      k.seekToBeginning(tps);
      List<ConsumerRecord<String, String>> got = pollN(k, expect, Duration.ofSeconds(20));
      got.addAll(pollFor(k, Duration.ofMillis(expect == 0 ? 2000 : 500))); // and nothing more
      return got;
    }
  }

  /** Transactions of the TV2 test: -Dkaas.tv2.transactions=10000 for the run. */
  static final int TV2_TRANSACTIONS = Integer.getInteger("kaas.tv2.transactions", 1000);

  static short finalizedTransactionVersion() throws Exception {
    FeatureMetadata fm = admin.describeFeatures().featureMetadata().get(30, TimeUnit.SECONDS);
    var tv = fm.finalizedFeatures().get("transaction.version");
    return tv == null ? 0 : tv.maxVersionLevel();
  }

  static short producerEpochOn(TopicPartition tp, long pid) throws Exception {
    return (short) admin.describeProducers(List.of(tp)).partitionResult(tp).get(30, TimeUnit.SECONDS)
        .activeProducers().stream().filter(s -> s.producerId() == pid).findFirst().orElseThrow()
        .producerEpoch();
  }

  @Test
  @Timeout(value = 900, unit = TimeUnit.SECONDS)
  void theProducerUsesTv2AndEachTransactionRaisesTheEpochByOne() throws Exception {
    assertEquals(2, finalizedTransactionVersion(), "a new kaas cluster finalizes transaction.version 2");
    String topic = createTopic(admin, unique("tv2"), 1);
    TopicPartition tp = new TopicPartition(topic, 0);
    String tid = unique("tv2-tx");
    try (KafkaProducer<String, String> p = txProducer(tid)) {
      p.initTransactions();
      TransactionDescription start =
          admin.describeTransactions(List.of(tid)).description(tid).get(30, TimeUnit.SECONDS);
      long pid = start.producerId();
      int epoch = start.producerEpoch();
      for (int i = 0; i < TV2_TRANSACTIONS; i++) {
        p.beginTransaction();
        p.send(new ProducerRecord<>(topic, "k", "v" + i));
        if (i % 10 == 9) {
          p.flush(); // written, so the partition is in the transaction and its marker moves the epoch
          p.abortTransaction();
        } else {
          p.commitTransaction();
        }
        if (i < 10) { // each end moved the epoch by one: EndTxn v5 (v4 keeps it), seen by the partition
          final int want = epoch + i + 1;
          Clients.waitFor(Duration.ofSeconds(10), () -> {
            try {
              return producerEpochOn(tp, pid) == want;
            } catch (Exception e) {
              return false;
            }
          }, "epoch " + want + " on " + tp);
        }
      }
      TransactionDescription end =
          admin.describeTransactions(List.of(tid)).description(tid).get(30, TimeUnit.SECONDS);
      assertEquals(pid, end.producerId());
      assertEquals(epoch + TV2_TRANSACTIONS, end.producerEpoch(), "one epoch per transaction");
    }
    long committed = TV2_TRANSACTIONS - TV2_TRANSACTIONS / 10;
    assertEquals(committed, values(read(topic, 1, "read_committed", (int) committed)).size());
  }

  @Test
  void afterADowngradeToTv1TheEpochStaysBetweenTransactions() throws Exception {
    String topic = createTopic(admin, unique("tv1"), 1);
    String tid = unique("tv1-tx");
    admin.updateFeatures(
        Map.of("transaction.version", new FeatureUpdate((short) 1, FeatureUpdate.UpgradeType.SAFE_DOWNGRADE)),
        new UpdateFeaturesOptions()).all().get(30, TimeUnit.SECONDS);
    try {
      Clients.waitFor(Duration.ofSeconds(10), () -> {
        try {
          return finalizedTransactionVersion() == 1;
        } catch (Exception e) {
          return false;
        }
      }, "transaction.version 1");
      Thread.sleep(1500); // every broker rereads the features file within a second
      try (KafkaProducer<String, String> p = txProducer(tid)) {
        p.initTransactions();
        short[] epochs = new short[2];
        for (int round = 0; round < 2; round++) {
          p.beginTransaction();
          p.send(new ProducerRecord<>(topic, "k", "v" + round));
          p.commitTransaction();
          TransactionDescription d =
              admin.describeTransactions(List.of(tid)).description(tid).get(30, TimeUnit.SECONDS);
          assertEquals(TransactionState.COMPLETE_COMMIT, d.state());
          epochs[round] = (short) d.producerEpoch();
        }
        assertEquals(epochs[0], epochs[1], "TV1 keeps the epoch between transactions");
      }
    } finally {
      admin.updateFeatures(
          Map.of("transaction.version", new FeatureUpdate((short) 2, FeatureUpdate.UpgradeType.UPGRADE)),
          new UpdateFeaturesOptions()).all().get(30, TimeUnit.SECONDS);
    }
  }

  @Test
  void commitMakesRecordsVisibleToReadCommitted() throws Exception {
    String topic = createTopic(admin, unique("tx-commit"), 3);
    try (KafkaProducer<String, String> p = txProducer(unique("tx"))) {
      p.initTransactions();
      p.beginTransaction();
      for (int i = 0; i < 30; i++) {
        p.send(new ProducerRecord<>(topic, i % 3, "k" + i, "c" + i));
      }
      p.commitTransaction();
    }
    List<String> got = values(read(topic, 3, "read_committed", 30));
    assertEquals(30, got.size());
    assertEquals(
        IntStream.range(0, 30).mapToObj(i -> "c" + i).sorted().toList(), got.stream().sorted().toList());
  }

  @Test
  void abortHidesRecordsFromReadCommittedOnly() throws Exception {
    String topic = createTopic(admin, unique("tx-abort"), 1);
    try (KafkaProducer<String, String> p = txProducer(unique("tx"))) {
      p.initTransactions();
      p.beginTransaction();
      p.send(new ProducerRecord<>(topic, "k", "aborted-1"));
      p.send(new ProducerRecord<>(topic, "k", "aborted-2"));
      p.flush();
      p.abortTransaction();
      p.beginTransaction();
      p.send(new ProducerRecord<>(topic, "k", "committed"));
      p.commitTransaction();
    }
    assertEquals(List.of("committed"), values(read(topic, 1, "read_committed", 1)));
    List<ConsumerRecord<String, String>> all = read(topic, 1, "read_uncommitted", 3);
    assertEquals(List.of("aborted-1", "aborted-2", "committed"), values(all));
    // the abort and commit markers take offsets 2 and 4
    assertEquals(List.of(0L, 1L, 3L), all.stream().map(ConsumerRecord::offset).toList());
  }

  @Test
  void aSecondInstanceFencesTheFirstAndAbortsItsTransaction() throws Exception {
    String topic = createTopic(admin, unique("tx-fence"), 1);
    String tid = unique("tx-fence");
    KafkaProducer<String, String> zombie = txProducer(tid);
    try {
      zombie.initTransactions();
      zombie.beginTransaction();
      zombie.send(new ProducerRecord<>(topic, "k", "zombie")).get();
      try (KafkaProducer<String, String> fresh = txProducer(tid)) {
        fresh.initTransactions(); // fences the zombie and aborts its open transaction
        fresh.beginTransaction();
        fresh.send(new ProducerRecord<>(topic, "k", "fresh"));
        fresh.commitTransaction();
      }
      Exception e =
          assertThrows(
              Exception.class,
              () -> {
                zombie.send(new ProducerRecord<>(topic, "k", "late")).get();
                zombie.commitTransaction();
              });
      assertTrue(fenced(e), "the zombie is fenced: " + e);
    } finally {
      zombie.close(Duration.ofSeconds(5));
    }
    assertEquals(List.of("fresh"), values(read(topic, 1, "read_committed", 1)));
  }

  static boolean fenced(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof ProducerFencedException || t instanceof InvalidProducerEpochException) {
        return true;
      }
    }
    return false;
  }

  @Test
  void sendOffsetsToTransactionCommitsOffsetsWithTheOutputAtomically() throws Exception {
    String in = createTopic(admin, unique("eos-in"), 2);
    String out = createTopic(admin, unique("eos-out"), 2);
    String group = unique("eos-g");
    Clients.produce(kaas, in, 2, 40);
    try (KafkaConsumer<String, String> k =
            consumer(kaas, group, ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        KafkaProducer<String, String> p = txProducer(unique("eos-tx"))) {
      p.initTransactions();
      k.subscribe(List.of(in));
      List<ConsumerRecord<String, String>> batch = pollN(k, 40, Duration.ofSeconds(30));
      assertEquals(40, batch.size());
      Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
      p.beginTransaction();
      for (ConsumerRecord<String, String> r : batch) {
        p.send(new ProducerRecord<>(out, r.partition(), r.key(), "copy-" + r.value()));
        next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1, "eos"));
      }
      p.sendOffsetsToTransaction(next, k.groupMetadata());
      p.commitTransaction();
      Map<TopicPartition, OffsetAndMetadata> committed = k.committed(next.keySet());
      assertEquals(next, committed);
      // an aborted transaction's offsets are not committed
      Map<TopicPartition, OffsetAndMetadata> bogus = new HashMap<>();
      next.keySet().forEach(tp -> bogus.put(tp, new OffsetAndMetadata(1)));
      p.beginTransaction();
      p.send(new ProducerRecord<>(out, 0, "k", "never"));
      p.sendOffsetsToTransaction(bogus, k.groupMetadata());
      p.abortTransaction();
      assertEquals(next, k.committed(next.keySet()));
      Map<TopicPartition, OffsetAndMetadata> viaAdmin =
          admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
      assertEquals(next, viaAdmin);
    }
    List<String> copied = values(read(out, 2, "read_committed", 40));
    assertEquals(40, copied.size());
    assertFalse(copied.contains("never"));
    assertEquals(
        IntStream.range(0, 40).mapToObj(i -> "copy-" + i).sorted().toList(), copied.stream().sorted().toList());
  }

  @Test
  void theCoordinatorAbortsATransactionPastItsTimeout() throws Exception {
    String topic = createTopic(admin, unique("tx-timeout"), 1);
    String tid = unique("tx-timeout");
    try (KafkaProducer<String, String> p = txProducer(tid, ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 2000)) {
      p.initTransactions();
      p.beginTransaction();
      p.send(new ProducerRecord<>(topic, "k", "expired")).get();
      Clients.waitFor(
          Duration.ofSeconds(30),
          () -> {
            try {
              TransactionState s = admin.describeTransactions(List.of(tid)).description(tid).get().state();
              return s == TransactionState.COMPLETE_ABORT;
            } catch (Exception e) {
              return false;
            }
          },
          "the coordinator to abort " + tid);
      assertThrows(KafkaException.class, p::commitTransaction);
    }
    assertEquals(List.of(), values(read(topic, 1, "read_committed", 0)));
    // the abort marker moved the last stable offset past the record: nothing stays pending
    try (KafkaConsumer<String, String> k = consumer(kaas, null, ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed")) {
      TopicPartition tp = new TopicPartition(topic, 0);
      assertEquals(2L, k.endOffsets(List.of(tp)).get(tp));
    }
  }
}
