package dev.kaas.compat;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.Predicate;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** Client settings and small helpers shared by the tests. */
final class Clients {
  private Clients() {}

  static String unique(String prefix) {
    return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
  }

  static Properties producerProps(KaasCluster c, Object... kv) {
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, c.bootstrap());
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
    put(p, kv);
    return p;
  }

  static KafkaProducer<String, String> producer(KaasCluster c, Object... kv) {
    return new KafkaProducer<>(producerProps(c, kv));
  }

  static Properties consumerProps(KaasCluster c, String group, Object... kv) {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, c.bootstrap());
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    if (group != null) {
      p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    }
    put(p, kv);
    return p;
  }

  static KafkaConsumer<String, String> consumer(KaasCluster c, String group, Object... kv) {
    return new KafkaConsumer<>(consumerProps(c, group, kv));
  }

  static void put(Properties p, Object... kv) {
    for (int i = 0; i < kv.length; i += 2) {
      p.put((String) kv[i], kv[i + 1]);
    }
  }

  static String createTopic(Admin admin, String name, int partitions, Map<String, String> configs)
      throws Exception {
    admin
        .createTopics(List.of(new NewTopic(name, partitions, (short) 1).configs(configs)))
        .all()
        .get(30, TimeUnit.SECONDS);
    // every partition has a leader before a test produces
    waitFor(
        Duration.ofSeconds(30),
        () -> {
          try {
            return admin.describeTopics(List.of(name)).allTopicNames().get().get(name).partitions()
                .stream()
                .allMatch(tp -> tp.leader() != null && tp.leader().id() >= 0);
          } catch (Exception e) {
            return false;
          }
        },
        "leaders of " + name);
    return name;
  }

  static String createTopic(Admin admin, String name, int partitions) throws Exception {
    return createTopic(admin, name, partitions, Map.of());
  }

  /** Produce {@code n} records {@code key-i}/{@code i} round-robin over partitions; flushed. */
  static void produce(KaasCluster c, String topic, int partitions, int n) throws Exception {
    try (KafkaProducer<String, String> p = producer(c, ProducerConfig.ACKS_CONFIG, "all")) {
      for (int i = 0; i < n; i++) {
        p.send(new ProducerRecord<>(topic, i % partitions, "k" + i, String.valueOf(i)));
      }
      p.flush();
    }
  }

  /** Poll until {@code n} records came or {@code timeout} passed; returns what came. */
  static List<ConsumerRecord<String, String>> pollN(
      KafkaConsumer<String, String> consumer, int n, Duration timeout) {
    List<ConsumerRecord<String, String>> out = new ArrayList<>();
    long deadline = System.nanoTime() + timeout.toNanos();
    while (out.size() < n && System.nanoTime() < deadline) {
      consumer.poll(Duration.ofMillis(200)).forEach(out::add);
    }
    return out;
  }

  /** Poll for {@code span}, everything that came. */
  static List<ConsumerRecord<String, String>> pollFor(
      KafkaConsumer<String, String> consumer, Duration span) {
    return pollN(consumer, Integer.MAX_VALUE, span);
  }

  static void waitFor(Duration timeout, BooleanSupplier cond, String what) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (!cond.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("timed out after " + timeout + " waiting for " + what);
      }
      Thread.sleep(100);
    }
  }

  /** Poll {@code consumers} in turn until {@code done} holds for each one's assignment. */
  static void pollUntilAssigned(
      Collection<KafkaConsumer<String, String>> consumers,
      Predicate<List<Collection<TopicPartition>>> done,
      Duration timeout,
      List<ConsumerRecord<String, String>> sink) {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (true) {
      List<Collection<TopicPartition>> assignments = new ArrayList<>();
      for (KafkaConsumer<String, String> k : consumers) {
        k.poll(Duration.ofMillis(100)).forEach(r -> {
          if (sink != null) {
            sink.add(r);
          }
        });
        assignments.add(k.assignment());
      }
      if (done.test(assignments)) {
        return;
      }
      assertTrue(System.nanoTime() < deadline, "assignment not reached in " + timeout + ": " + assignments);
    }
  }

  static List<String> values(Collection<ConsumerRecord<String, String>> records) {
    return records.stream().map(ConsumerRecord::value).toList();
  }
}
