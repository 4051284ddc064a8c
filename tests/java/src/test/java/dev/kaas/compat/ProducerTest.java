package dev.kaas.compat;

import static dev.kaas.compat.Clients.consumer;
import static dev.kaas.compat.Clients.createTopic;
import static dev.kaas.compat.Clients.pollN;
import static dev.kaas.compat.Clients.producer;
import static dev.kaas.compat.Clients.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import java.util.stream.IntStream;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class ProducerTest extends OnKaas {
  /** Every record of {@code topic}-0 from offset 0, read_uncommitted. */
  static List<ConsumerRecord<String, String>> readAll(String topic, int expected) {
    try (KafkaConsumer<String, String> k = consumer(kaas, null)) {
      TopicPartition tp = new TopicPartition(topic, 0);
      k.assign(List.of(tp));
      k.seekToBeginning(List.of(tp));
      List<ConsumerRecord<String, String>> got = pollN(k, expected, Duration.ofSeconds(30));
      got.addAll(Clients.pollFor(k, Duration.ofMillis(300))); // nothing more than expected
      return got;
    }
  }

  @Test
  void idempotentProducerKeepsOrderWithoutDuplicatesAcrossALeaderKill() throws Exception {
    assumeTrue(kaas.data().isPresent(), "killing a broker needs KAAS_DATA (the cluster's data directory)");
    String topic = createTopic(admin, unique("idem"), 1);
    int n = 3000;
    List<Future<RecordMetadata>> sent = new ArrayList<>();
    try (KafkaProducer<String, String> p =
        producer(
            kaas,
            ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true,
            ProducerConfig.ACKS_CONFIG, "all",
            ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 5,
            ProducerConfig.BATCH_SIZE_CONFIG, 2048,
            ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 5000,
            ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 90_000,
            ProducerConfig.RETRY_BACKOFF_MS_CONFIG, 50)) {
      int leader = kaas.leaderOf(admin, topic, 0);
      for (int i = 0; i < n; i++) {
        sent.add(p.send(new ProducerRecord<>(topic, "k" + i, String.valueOf(i))));
        if (i == n / 3) {
          p.flush();
          kaas.killBroker(leader); // the rest is produced while it restarts and leadership moves
        }
        if (i % 100 == 0) {
          Thread.sleep(5);
        }
      }
      p.flush();
    }
    long prev = -1;
    for (Future<RecordMetadata> f : sent) {
      long off = f.get().offset();
      assertTrue(off > prev, "acknowledged offsets increase: " + off + " after " + prev);
      prev = off;
    }
    List<ConsumerRecord<String, String>> got = readAll(topic, n);
    List<String> want = IntStream.range(0, n).mapToObj(String::valueOf).toList();
    assertEquals(want, Clients.values(got), "every record once, in order");
    for (int i = 0; i < n; i++) {
      assertEquals(i, got.get(i).offset(), "no gap at offset " + i);
    }
  }

  @ParameterizedTest(name = "acks={0}")
  @ValueSource(strings = {"0", "1", "all", "-1"})
  void everyAcksSettingDelivers(String acks) throws Exception {
    String topic = createTopic(admin, unique("acks"), 1);
    int n = 200;
    List<Future<RecordMetadata>> sent = new ArrayList<>();
    boolean idempotent = acks.equals("all") || acks.equals("-1");
    try (KafkaProducer<String, String> p =
        producer(kaas, ProducerConfig.ACKS_CONFIG, acks, ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, idempotent)) {
      for (int i = 0; i < n; i++) {
        sent.add(p.send(new ProducerRecord<>(topic, "k" + i, String.valueOf(i))));
      }
      p.flush();
    }
    for (int i = 0; i < n; i++) {
      RecordMetadata md = sent.get(i).get();
      if (acks.equals("0")) {
        assertEquals(-1L, md.offset(), "acks=0 learns no offset");
      } else {
        assertEquals(i, md.offset());
      }
    }
    List<ConsumerRecord<String, String>> got = readAll(topic, n);
    assertEquals(IntStream.range(0, n).mapToObj(String::valueOf).toList(), Clients.values(got));
  }

  @ParameterizedTest(name = "compression.type={0}")
  @ValueSource(strings = {"none", "gzip", "snappy", "lz4", "zstd"})
  void everyCompressionCodecRoundTrips(String codec) throws Exception {
    String topic = createTopic(admin, unique("codec-" + codec), 1);
    int n = 500;
    String pad = "x".repeat(200); // compressible
    long ts0 = System.currentTimeMillis() - 60_000;
    try (KafkaProducer<String, String> p =
        producer(kaas, ProducerConfig.COMPRESSION_TYPE_CONFIG, codec, ProducerConfig.LINGER_MS_CONFIG, 20,
            ProducerConfig.BATCH_SIZE_CONFIG, 64 * 1024)) {
      for (int i = 0; i < n; i++) {
        p.send(new ProducerRecord<>(topic, 0, ts0 + i, "k" + i, i + pad));
      }
      p.flush();
    }
    List<ConsumerRecord<String, String>> got = readAll(topic, n);
    assertEquals(n, got.size());
    for (int i = 0; i < n; i++) {
      ConsumerRecord<String, String> r = got.get(i);
      assertEquals(i + pad, r.value());
      assertEquals("k" + i, r.key());
      assertEquals(ts0 + i, r.timestamp());
      assertEquals(TimestampType.CREATE_TIME, r.timestampType());
    }
  }

  @Test
  void topicCompressionTypeRecompressesAndLogAppendTimeIsStamped() throws Exception {
    String topic =
        createTopic(admin, unique("topic-codec"), 1,
            Map.of("compression.type", "zstd", "message.timestamp.type", "LogAppendTime"));
    long before = System.currentTimeMillis();
    try (KafkaProducer<String, String> p = producer(kaas, ProducerConfig.COMPRESSION_TYPE_CONFIG, "gzip")) {
      for (int i = 0; i < 50; i++) {
        p.send(new ProducerRecord<>(topic, 0, 1_000L + i, "k" + i, "v" + i));
      }
      p.flush();
    }
    List<ConsumerRecord<String, String>> got = readAll(topic, 50);
    assertEquals(IntStream.range(0, 50).mapToObj(i -> "v" + i).toList(), Clients.values(got));
    for (ConsumerRecord<String, String> r : got) {
      assertEquals(TimestampType.LOG_APPEND_TIME, r.timestampType());
      assertTrue(r.timestamp() >= before - 5_000, "log append time " + r.timestamp() + " is the broker's");
      assertNotEquals(1_000L, r.timestamp());
    }
  }
}
