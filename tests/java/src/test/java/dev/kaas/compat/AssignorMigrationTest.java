package dev.kaas.compat;

import static dev.kaas.compat.Clients.createTopic;
import static dev.kaas.compat.Clients.pollUntilAssigned;
import static dev.kaas.compat.Clients.unique;
import static dev.kaas.compat.ConsumerGroupTest.describe;
import static dev.kaas.compat.ConsumerGroupTest.member;
import static dev.kaas.compat.ConsumerGroupTest.partitions;
import static dev.kaas.compat.ConsumerGroupTest.splits;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Client-side assignors (classic), server-side assignors (consumer), and online migration. */
class AssignorMigrationTest extends OnKaas {
  static Set<TopicPartition> both(String a, String b, int n) {
    Set<TopicPartition> s = new HashSet<>(partitions(a, n));
    s.addAll(partitions(b, n));
    return s;
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"range", "roundrobin", "sticky", "cooperative-sticky"})
  void classicAssignorIsNamedAndShapesTheAssignment(String assignor) throws Exception {
    String a = createTopic(admin, unique("ca-a"), 2);
    String b = createTopic(admin, unique("ca-b"), 2);
    String group = unique("g-classic-" + assignor);
    String cls = switch (assignor) {
      case "range" -> "org.apache.kafka.clients.consumer.RangeAssignor";
      case "roundrobin" -> "org.apache.kafka.clients.consumer.RoundRobinAssignor";
      case "sticky" -> "org.apache.kafka.clients.consumer.StickyAssignor";
      default -> "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
    };
    ConsumerGroupTest.Recorder r1 = new ConsumerGroupTest.Recorder();
    try (KafkaConsumer<String, String> c1 = member("classic", group, ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, cls)) {
      c1.subscribe(List.of(a, b), r1);
      pollUntilAssigned(List.of(c1), as -> as.get(0).size() == 4, Duration.ofSeconds(60), null);
      int revokedCallsBefore = (int) r1.calls.stream().filter(s -> s.startsWith("revoked:")).count();
      try (KafkaConsumer<String, String> c2 = member("classic", group, ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, cls)) {
        c2.subscribe(List.of(a, b));
        pollUntilAssigned(List.of(c1, c2), as -> splits(as, both(a, b, 2)), Duration.ofSeconds(60), null);
        ConsumerGroupDescription d = describe(group);
        assertEquals(assignor, d.partitionAssignor());
        assertEquals(GroupType.CLASSIC, d.type());
        assertEquals(2, c1.assignment().size());
        if (assignor.equals("range")) {
          // range assigns per topic: each member gets the same partition of both topics
          Set<Integer> ps = c1.assignment().stream().map(TopicPartition::partition).collect(Collectors.toSet());
          assertEquals(1, ps.size(), c1.assignment().toString());
        }
        long revokedCalls = r1.calls.stream().filter(s -> s.startsWith("revoked:")).count();
        if (assignor.equals("cooperative-sticky")) {
          // incremental: only the two partitions that moved are revoked
          assertEquals(c2.assignment(), r1.revoked, r1.calls.toString());
        } else {
          // eager: everything is revoked before the rebalance
          assertTrue(revokedCalls > revokedCallsBefore, r1.calls.toString());
          assertTrue(r1.calls.contains("revoked:4"), r1.calls.toString());
        }
      }
    }
  }

  @ParameterizedTest(name = "group.remote.assignor={0}")
  @ValueSource(strings = {"uniform", "range"})
  void serverSideAssignorIsNamedAndShapesTheAssignment(String assignor) throws Exception {
    String a = createTopic(admin, unique("sa-a"), 2);
    String b = createTopic(admin, unique("sa-b"), 2);
    String group = unique("g-server-" + assignor);
    try (KafkaConsumer<String, String> c1 = member("consumer", group, ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, assignor);
        KafkaConsumer<String, String> c2 = member("consumer", group, ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, assignor)) {
      c1.subscribe(List.of(a, b));
      c2.subscribe(List.of(a, b));
      pollUntilAssigned(List.of(c1, c2), as -> splits(as, both(a, b, 2)), Duration.ofSeconds(60), null);
      ConsumerGroupDescription d = describe(group);
      assertEquals(assignor, d.partitionAssignor());
      assertEquals(GroupType.CONSUMER, d.type());
      assertEquals(2, c1.assignment().size());
      assertEquals(2, c2.assignment().size());
      if (assignor.equals("range")) {
        Set<Integer> ps = c1.assignment().stream().map(TopicPartition::partition).collect(Collectors.toSet());
        assertEquals(1, ps.size(), "range co-partitions: " + c1.assignment());
      }
    }
  }

  /**
   * commitSync, polling and retrying while a rebalance is in progress (as the exception
   * asks: a classic member may be asked to rejoin while the group converts).
   */
  static void commit(KafkaConsumer<String, String> c, List<ConsumerRecord<String, String>> sink) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (true) {
      try {
        c.commitSync();
        return;
      } catch (org.apache.kafka.common.errors.RebalanceInProgressException e) {
        assertTrue(System.nanoTime() < deadline, "still rebalancing after 30 s: " + e);
        c.poll(Duration.ofMillis(100)).forEach(sink::add);
      }
    }
  }

  @Test
  void aLiveGroupMigratesFromClassicToConsumerAndBack() throws Exception {
    String topic = createTopic(admin, unique("migrate"), 4);
    String group = unique("g-migrate");
    Set<TopicPartition> all = partitions(topic, 4);
    Clients.produce(kaas, topic, 4, 40);
    List<ConsumerRecord<String, String>> seen = new ArrayList<>();
    Object[] coop = {ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"};
    KafkaConsumer<String, String> classic1 = member("classic", group, coop);
    KafkaConsumer<String, String> modern = null;
    KafkaConsumer<String, String> classic2 = null;
    try {
      classic1.subscribe(List.of(topic));
      pollUntilAssigned(List.of(classic1), as -> as.get(0).size() == 4, Duration.ofSeconds(60), seen);
      assertEquals(GroupType.CLASSIC, describe(group).type());
      commit(classic1, seen);
      // a consumer-protocol member joins the classic group: it is converted online
      modern = member("consumer", group);
      modern.subscribe(List.of(topic));
      pollUntilAssigned(List.of(classic1, modern), as -> splits(as, all), Duration.ofSeconds(60), seen);
      ConsumerGroupDescription d = describe(group);
      assertEquals(GroupType.CONSUMER, d.type());
      assertEquals(2, d.members().size());
      assertTrue(d.members().stream().anyMatch(m -> m.upgraded().orElse(false)), "the new member is upgraded");
      assertTrue(d.members().stream().anyMatch(m -> !m.upgraded().orElse(true)), "the classic member is not");
      commit(classic1, seen);
      commit(modern, seen);
      classic1.close();
      classic1 = null;
      pollUntilAssigned(List.of(modern), as -> as.get(0).equals(all), Duration.ofSeconds(60), seen);
      // a classic member joins the consumer group; when the last consumer-protocol member
      // leaves, the group is converted back to classic
      classic2 = member("classic", group, coop);
      classic2.subscribe(List.of(topic));
      pollUntilAssigned(List.of(modern, classic2), as -> splits(as, all), Duration.ofSeconds(60), seen);
      assertEquals(GroupType.CONSUMER, describe(group).type());
      commit(modern, seen);
      commit(classic2, seen);
      modern.close();
      modern = null;
      pollUntilAssigned(List.of(classic2), as -> as.get(0).equals(all), Duration.ofSeconds(60), seen);
      Clients.waitFor(Duration.ofSeconds(30), () -> {
        try {
          return describe(group).type() == GroupType.CLASSIC;
        } catch (Exception e) {
          return false;
        }
      }, "the group back to classic");
      seen.addAll(Clients.pollFor(classic2, Duration.ofSeconds(1)));
      commit(classic2, seen);
      Map<TopicPartition, OffsetAndMetadata> committed =
          admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
      assertEquals(all, committed.keySet());
      assertEquals(40, committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum(),
          "the group's offsets survived both conversions: " + committed);
      Set<String> values = seen.stream().map(ConsumerRecord::value).collect(Collectors.toSet());
      assertEquals(40, values.size(), "every record was read");
      assertFalse(describe(group).members().isEmpty());
    } finally {
      for (KafkaConsumer<String, String> k : new ArrayList<>(java.util.Arrays.asList(classic1, modern, classic2))) {
        if (k != null) {
          k.close(Duration.ofSeconds(5));
        }
      }
    }
  }
}
