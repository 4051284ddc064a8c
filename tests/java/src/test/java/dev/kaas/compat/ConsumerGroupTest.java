package dev.kaas.compat;

import static dev.kaas.compat.Clients.createTopic;
import static dev.kaas.compat.Clients.pollN;
import static dev.kaas.compat.Clients.pollUntilAssigned;
import static dev.kaas.compat.Clients.producer;
import static dev.kaas.compat.Clients.unique;
import static dev.kaas.compat.Clients.values;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** KafkaConsumer in a group, each test with group.protocol=classic and =consumer (KIP-848). */
class ConsumerGroupTest extends OnKaas {
  /** A group consumer of {@code protocol}; the classic one with a short session. */
  static KafkaConsumer<String, String> member(String protocol, String group, Object... kv) {
    List<Object> all = new ArrayList<>(List.of(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol));
    if (protocol.equals("classic")) {
      all.addAll(List.of(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 6000,
          ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 500));
    }
    all.addAll(List.of(kv));
    return Clients.consumer(kaas, group, all.toArray());
  }

  static Set<TopicPartition> partitions(String topic, int n) {
    return IntStream.range(0, n).mapToObj(p -> new TopicPartition(topic, p)).collect(Collectors.toSet());
  }

  /** The assignments split {@code want} between them, none empty. */
  static boolean splits(List<Collection<TopicPartition>> as, Set<TopicPartition> want) {
    Set<TopicPartition> union = new HashSet<>();
    int total = 0;
    for (Collection<TopicPartition> a : as) {
      if (a.isEmpty()) {
        return false;
      }
      union.addAll(a);
      total += a.size();
    }
    return total == want.size() && union.equals(want);
  }

  static ConsumerGroupDescription describe(String group) throws Exception {
    return admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get(30, TimeUnit.SECONDS);
  }

  /** Records every listener call, as "assigned:[...]" / "revoked:[...]" / "lost:[...]". */
  static final class Recorder implements ConsumerRebalanceListener {
    final List<String> calls = new CopyOnWriteArrayList<>();
    final Set<TopicPartition> revoked = java.util.concurrent.ConcurrentHashMap.newKeySet();

    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> ps) {
      calls.add("revoked:" + ps.size());
      revoked.addAll(ps);
    }

    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> ps) {
      calls.add("assigned:" + ps.size());
    }

    @Override
    public void onPartitionsLost(Collection<TopicPartition> ps) {
      calls.add("lost:" + ps.size());
    }
  }

  @ParameterizedTest(name = "group.protocol={0}")
  @ValueSource(strings = {"classic", "consumer"})
  void subscribeByListSharesPartitionsAndReadsEveryRecordOnce(String protocol) throws Exception {
    String topic = createTopic(admin, unique("list-" + protocol), 4);
    String group = unique("g-list");
    List<ConsumerRecord<String, String>> a = new ArrayList<>();
    List<ConsumerRecord<String, String>> b = new ArrayList<>();
    try (KafkaConsumer<String, String> c1 = member(protocol, group, ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "latest");
        KafkaConsumer<String, String> c2 = member(protocol, group, ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "latest")) {
      c1.subscribe(List.of(topic));
      c2.subscribe(List.of(topic));
      pollUntilAssigned(List.of(c1, c2), as -> splits(as, partitions(topic, 4)), Duration.ofSeconds(60), null);
      // the positions are resolved to the (empty) end before anything is produced
      c1.assignment().forEach(c1::position);
      c2.assignment().forEach(c2::position);
      Clients.produce(kaas, topic, 4, 100);
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      while (a.size() + b.size() < 100 && System.nanoTime() < deadline) {
        c1.poll(Duration.ofMillis(100)).forEach(a::add);
        c2.poll(Duration.ofMillis(100)).forEach(b::add);
      }
      for (ConsumerRecord<String, String> r : a) {
        assertTrue(c1.assignment().contains(new TopicPartition(r.topic(), r.partition())));
      }
      for (ConsumerRecord<String, String> r : b) {
        assertTrue(c2.assignment().contains(new TopicPartition(r.topic(), r.partition())));
      }
      ConsumerGroupDescription d = describe(group);
      assertEquals(2, d.members().size());
      assertEquals(protocol.equals("classic") ? GroupType.CLASSIC : GroupType.CONSUMER, d.type());
    }
    List<String> all = new ArrayList<>(values(a));
    all.addAll(values(b));
    assertEquals(IntStream.range(0, 100).mapToObj(String::valueOf).sorted().toList(), all.stream().sorted().toList());
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"classic-java-pattern", "consumer-java-pattern", "consumer-re2j"})
  void subscribeByPatternFollowsNewTopics(String how) throws Exception {
    String protocol = how.startsWith("classic") ? "classic" : "consumer";
    String prefix = unique("pat").replace("-", "");
    createTopic(admin, prefix + "-a", 2);
    createTopic(admin, prefix + "-b", 1);
    createTopic(admin, "x" + prefix + "-c", 1); // not matched
    try (KafkaConsumer<String, String> c =
        member(protocol, unique("g-pat"), ConsumerConfig.METADATA_MAX_AGE_CONFIG, 1000)) {
      if (how.endsWith("re2j")) {
        c.subscribe(new SubscriptionPattern(prefix + "-.*"));
      } else {
        c.subscribe(Pattern.compile(prefix + "-.*"));
      }
      Set<TopicPartition> want = new HashSet<>(partitions(prefix + "-a", 2));
      want.add(new TopicPartition(prefix + "-b", 0));
      pollUntilAssigned(List.of(c), as -> as.get(0).equals(want), Duration.ofSeconds(60), null);
      createTopic(admin, prefix + "-d", 1);
      want.add(new TopicPartition(prefix + "-d", 0));
      pollUntilAssigned(List.of(c), as -> as.get(0).equals(want), Duration.ofSeconds(60), null);
    }
  }

  @ParameterizedTest(name = "group.protocol={0}")
  @ValueSource(strings = {"classic", "consumer"})
  void rebalanceListenerSeesPartitionsMove(String protocol) throws Exception {
    String topic = createTopic(admin, unique("listener-" + protocol), 4);
    String group = unique("g-listener");
    Recorder r1 = new Recorder();
    Recorder r2 = new Recorder();
    Object[] cooperative = protocol.equals("classic")
        ? new Object[] {ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"}
        : new Object[0];
    try (KafkaConsumer<String, String> c1 = member(protocol, group, cooperative)) {
      c1.subscribe(List.of(topic), r1);
      pollUntilAssigned(List.of(c1), as -> as.get(0).size() == 4, Duration.ofSeconds(60), null);
      assertTrue(r1.calls.contains("assigned:4"), r1.calls.toString());
      Set<TopicPartition> kept;
      try (KafkaConsumer<String, String> c2 = member(protocol, group, cooperative)) {
        c2.subscribe(List.of(topic), r2);
        pollUntilAssigned(List.of(c1, c2), as -> splits(as, partitions(topic, 4)), Duration.ofSeconds(60), null);
        kept = new HashSet<>(c1.assignment());
        // incremental: only what moved to c2 is revoked from c1
        assertEquals(c2.assignment(), r1.revoked, r1.calls.toString());
        assertFalse(r1.revoked.stream().anyMatch(kept::contains));
        assertTrue(r2.calls.stream().anyMatch(s -> s.startsWith("assigned:") && !s.equals("assigned:0")),
            r2.calls.toString());
      }
      // c2 left: c1 gets everything back, keeping what it had
      pollUntilAssigned(List.of(c1), as -> as.get(0).size() == 4, Duration.ofSeconds(60), null);
      assertTrue(c1.assignment().containsAll(kept));
      assertTrue(r2.calls.stream().anyMatch(s -> s.startsWith("revoked:")), "c2 revoked on close: " + r2.calls);
      assertFalse(r1.calls.contains("lost:4"), r1.calls.toString());
    }
  }

  @ParameterizedTest(name = "group.protocol={0}")
  @ValueSource(strings = {"classic", "consumer"})
  void staticMemberRejoinsWithItsAssignment(String protocol) throws Exception {
    String topic = createTopic(admin, unique("static-" + protocol), 4);
    String group = unique("g-static");
    Set<TopicPartition> first;
    Recorder r2 = new Recorder();
    try (KafkaConsumer<String, String> c2 = member(protocol, group, ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "i2")) {
      c2.subscribe(List.of(topic), r2);
      try (KafkaConsumer<String, String> c1 = member(protocol, group, ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "i1")) {
        c1.subscribe(List.of(topic));
        pollUntilAssigned(List.of(c1, c2), as -> splits(as, partitions(topic, 4)), Duration.ofSeconds(60), null);
        first = new HashSet<>(c1.assignment());
        Set<String> ids = describe(group).members().stream()
            .map(m -> m.groupInstanceId().orElse("")).collect(Collectors.toSet());
        assertEquals(Set.of("i1", "i2"), ids);
      }
      Set<TopicPartition> c2Had = new HashSet<>(c2.assignment());
      int revokedBefore = r2.revoked.size();
      // i1 is back within its session: same partitions, and c2 keeps its own
      try (KafkaConsumer<String, String> c1 = member(protocol, group, ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "i1")) {
        c1.subscribe(List.of(topic));
        pollUntilAssigned(List.of(c1, c2), as -> splits(as, partitions(topic, 4)), Duration.ofSeconds(60), null);
        assertEquals(first, c1.assignment());
        assertEquals(c2Had, c2.assignment());
        assertEquals(revokedBefore, r2.revoked.size(), "c2 lost nothing: " + r2.calls);
      }
    }
  }

  @ParameterizedTest(name = "group.protocol={0}")
  @ValueSource(strings = {"classic", "consumer"})
  void commitSyncAndAsyncAreReadBack(String protocol) throws Exception {
    String topic = createTopic(admin, unique("commit-" + protocol), 2);
    String group = unique("g-commit");
    Clients.produce(kaas, topic, 2, 20);
    TopicPartition p0 = new TopicPartition(topic, 0);
    TopicPartition p1 = new TopicPartition(topic, 1);
    try (KafkaConsumer<String, String> c = member(protocol, group)) {
      c.subscribe(List.of(topic));
      assertEquals(20, pollN(c, 20, Duration.ofSeconds(60)).size());
      c.commitSync(Map.of(p0, new OffsetAndMetadata(3, "sync-meta"), p1, new OffsetAndMetadata(4)));
      Map<TopicPartition, OffsetAndMetadata> got = c.committed(Set.of(p0, p1));
      assertEquals(3, got.get(p0).offset());
      assertEquals("sync-meta", got.get(p0).metadata());
      assertEquals(4, got.get(p1).offset());
      CompletableFuture<Exception> done = new CompletableFuture<>();
      c.commitAsync(Map.of(p0, new OffsetAndMetadata(7, "async-meta")), (offsets, e) -> done.complete(e));
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      while (!done.isDone() && System.nanoTime() < deadline) {
        c.poll(Duration.ofMillis(100)); // callbacks run in poll
      }
      assertNull(done.getNow(new Exception("no callback")), "commitAsync succeeded");
      c.commitSync(); // the consumed positions: 10 and 10
      got = c.committed(Set.of(p0, p1));
      assertEquals(10, got.get(p0).offset());
      assertEquals(10, got.get(p1).offset());
    }
    Map<TopicPartition, OffsetAndMetadata> viaAdmin =
        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
    assertEquals(10, viaAdmin.get(p0).offset());
    assertEquals(10, viaAdmin.get(p1).offset());
    // a new member resumes from the commit
    Clients.produce(kaas, topic, 2, 4);
    try (KafkaConsumer<String, String> c = member(protocol, group)) {
      c.subscribe(List.of(topic));
      List<ConsumerRecord<String, String>> rest = pollN(c, 4, Duration.ofSeconds(60));
      assertEquals(4, rest.size());
      assertTrue(rest.stream().allMatch(r -> r.offset() >= 10), rest.toString());
    }
  }

  @ParameterizedTest(name = "group.protocol={0}")
  @ValueSource(strings = {"classic", "consumer"})
  void seekPositionAndOffsetsForTimes(String protocol) throws Exception {
    String topic = createTopic(admin, unique("seek-" + protocol), 1);
    TopicPartition tp = new TopicPartition(topic, 0);
    long base = System.currentTimeMillis() - 3_600_000;
    try (KafkaProducer<String, String> p = producer(kaas, ProducerConfig.ACKS_CONFIG, "all")) {
      for (int i = 0; i < 20; i++) {
        p.send(new ProducerRecord<>(topic, 0, base + 10L * i, "k" + i, String.valueOf(i)));
      }
      p.flush();
    }
    try (KafkaConsumer<String, String> c = member(protocol, unique("g-seek"))) {
      c.assign(List.of(tp));
      c.seek(tp, 5);
      List<ConsumerRecord<String, String>> got = pollN(c, 3, Duration.ofSeconds(30));
      assertEquals(5, got.get(0).offset());
      assertEquals("5", got.get(0).value());
      c.seekToEnd(List.of(tp));
      assertEquals(20, c.position(tp));
      c.seekToBeginning(List.of(tp));
      assertEquals(0, c.position(tp));
      assertEquals(Map.of(tp, 0L), c.beginningOffsets(List.of(tp)));
      assertEquals(Map.of(tp, 20L), c.endOffsets(List.of(tp)));
      Map<TopicPartition, OffsetAndTimestamp> t = c.offsetsForTimes(Map.of(tp, base + 25));
      assertEquals(3, t.get(tp).offset());
      assertEquals(base + 30, t.get(tp).timestamp());
      assertEquals(0, c.offsetsForTimes(Map.of(tp, base - 1)).get(tp).offset());
      assertNull(c.offsetsForTimes(Map.of(tp, base + 1000)).get(tp));
      c.seek(tp, t.get(tp).offset());
      assertEquals("3", pollN(c, 1, Duration.ofSeconds(30)).get(0).value());
    }
  }

  @ParameterizedTest(name = "group.protocol={0}")
  @ValueSource(strings = {"classic", "consumer"})
  void readCommittedSkipsAbortedAndWaitsForOpenTransactions(String protocol) throws Exception {
    String topic = createTopic(admin, unique("rc-" + protocol), 1);
    TopicPartition tp = new TopicPartition(topic, 0);
    try (KafkaProducer<String, String> p = producer(kaas, ProducerConfig.TRANSACTIONAL_ID_CONFIG, unique("rc-tx"));
        KafkaConsumer<String, String> rc = member(protocol, unique("g-rc"), ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        KafkaConsumer<String, String> ru = member(protocol, unique("g-ru"), ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted")) {
      p.initTransactions();
      p.beginTransaction();
      p.send(new ProducerRecord<>(topic, 0, "k", "committed-1"));
      p.commitTransaction();
      p.beginTransaction();
      p.send(new ProducerRecord<>(topic, 0, "k", "aborted")).get(); // sent, then aborted
      p.abortTransaction();
      p.beginTransaction();
      p.send(new ProducerRecord<>(topic, 0, "k", "open")).get();
      rc.subscribe(List.of(topic));
      ru.subscribe(List.of(topic));
      assertEquals(List.of("committed-1"), values(Clients.pollFor(rc, Duration.ofSeconds(4))));
      assertEquals(List.of("committed-1", "aborted", "open"), values(pollN(ru, 3, Duration.ofSeconds(30))));
      // committed-1, its marker, aborted, its marker: the last stable offset stops at the open one (4)
      assertEquals(4L, rc.endOffsets(List.of(tp)).get(tp), "the last stable offset stops at the open transaction");
      p.commitTransaction();
      assertEquals(List.of("open"), values(pollN(rc, 1, Duration.ofSeconds(30))));
    }
  }

  @ParameterizedTest(name = "group.protocol={0}")
  @ValueSource(strings = {"classic", "consumer"})
  void aMemberPastMaxPollIntervalLosesItsPartitions(String protocol) throws Exception {
    String topic = createTopic(admin, unique("mpi-" + protocol), 2);
    String group = unique("g-mpi");
    Recorder r1 = new Recorder();
    try (KafkaConsumer<String, String> slow = member(protocol, group, ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, 3000)) {
      slow.subscribe(List.of(topic), r1);
      pollUntilAssigned(List.of(slow), as -> as.get(0).size() == 2, Duration.ofSeconds(60), null);
      try (KafkaConsumer<String, String> fast = member(protocol, group)) {
        fast.subscribe(List.of(topic));
        // slow stops polling; after 3 s it leaves the group and fast gets both partitions
        long t0 = System.nanoTime();
        pollUntilAssigned(List.of(fast), as -> as.get(0).size() == 2, Duration.ofSeconds(60), null);
        assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(2500) || protocol.equals("consumer"),
            "fast got everything only after slow's poll interval");
        Set<String> members = describe(group).members().stream().map(MemberDescription::consumerId)
            .collect(Collectors.toSet());
        assertEquals(1, members.size(), "slow left the group: " + members);
        // slow's next poll finds it was dropped: its partitions are lost or revoked, then it rejoins
        pollUntilAssigned(List.of(slow, fast), as -> splits(as, partitions(topic, 2)), Duration.ofSeconds(60), null);
        assertTrue(r1.calls.stream().anyMatch(s -> s.startsWith("lost:") || s.startsWith("revoked:")), r1.calls.toString());
      }
    }
  }
}
