package dev.kaas.compat;

import static dev.kaas.compat.Clients.createTopic;
import static dev.kaas.compat.Clients.producer;
import static dev.kaas.compat.Clients.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.junit.jupiter.api.Test;

/** KafkaShareConsumer (KIP-932) in share groups. */
class ShareConsumerTest extends OnKaas {
  /** A share group reading from the earliest offset, with more group configs. */
  static String shareGroup(String prefix, String... configs) throws Exception {
    String group = unique(prefix);
    List<AlterConfigOp> ops = new ArrayList<>();
    ops.add(new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET));
    for (int i = 0; i < configs.length; i += 2) {
      ops.add(new AlterConfigOp(new ConfigEntry(configs[i], configs[i + 1]), AlterConfigOp.OpType.SET));
    }
    admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, group), ops))
        .all().get(30, TimeUnit.SECONDS);
    return group;
  }

  static KafkaShareConsumer<String, String> shareConsumer(String group, String mode) {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, kaas.bootstrap());
    p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    p.put("share.acknowledgement.mode", mode);
    return new KafkaShareConsumer<>(p);
  }

  static List<ConsumerRecord<String, String>> pollN(KafkaShareConsumer<String, String> c, int n, Duration timeout) {
    List<ConsumerRecord<String, String>> out = new ArrayList<>();
    long deadline = System.nanoTime() + timeout.toNanos();
    while (out.size() < n && System.nanoTime() < deadline) {
      c.poll(Duration.ofMillis(200)).forEach(out::add);
    }
    return out;
  }

  static Set<String> values(Collection<ConsumerRecord<String, String>> rs) {
    return rs.stream().map(ConsumerRecord::value).collect(Collectors.toSet());
  }

  static Set<String> range(int n) {
    return IntStream.range(0, n).mapToObj(String::valueOf).collect(Collectors.toSet());
  }

  @Test
  void implicitAcknowledgementAcceptsWhatWasPolled() throws Exception {
    String topic = createTopic(admin, unique("share-implicit"), 2);
    String group = shareGroup("sg-implicit");
    Clients.produce(kaas, topic, 2, 40);
    try (KafkaShareConsumer<String, String> c = shareConsumer(group, "implicit")) {
      c.subscribe(List.of(topic));
      List<ConsumerRecord<String, String>> got = pollN(c, 40, Duration.ofSeconds(60));
      assertEquals(40, got.size());
      assertEquals(range(40), values(got));
      assertTrue(got.stream().allMatch(r -> r.deliveryCount().equals(Optional.of((short) 1))));
      Map<?, Optional<org.apache.kafka.common.KafkaException>> results = c.commitSync();
      assertTrue(results.values().stream().allMatch(Optional::isEmpty), "acknowledged: " + results);
    }
    // the group moved past them: a new member sees nothing
    try (KafkaShareConsumer<String, String> c = shareConsumer(group, "implicit")) {
      c.subscribe(List.of(topic));
      assertEquals(List.of(), pollN(c, 1, Duration.ofSeconds(4)));
    }
    var offsets = admin.listShareGroupOffsets(Map.of(group, new org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec()))
        .partitionsToOffsetInfo(group).get(30, TimeUnit.SECONDS);
    assertEquals(2, offsets.size(), offsets.toString());
    offsets.values().forEach(o -> {
      assertEquals(20, o.startOffset(), "start offset after 20 acknowledged: " + offsets);
      assertEquals(Optional.of(0L), o.lag());
    });
  }

  @Test
  void explicitAcceptReleaseRejectRedeliversOnlyTheReleased() throws Exception {
    String topic = createTopic(admin, unique("share-explicit"), 1);
    String group = shareGroup("sg-explicit");
    Clients.produce(kaas, topic, 1, 12);
    List<String> accepted = new ArrayList<>();
    Set<String> released = new HashSet<>();
    try (KafkaShareConsumer<String, String> c = shareConsumer(group, "explicit")) {
      c.subscribe(List.of(topic));
      int seen = 0;
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while (seen < 12 && System.nanoTime() < deadline) {
        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
          seen++;
          int v = Integer.parseInt(r.value());
          assertEquals(Optional.of((short) 1), r.deliveryCount());
          AcknowledgeType t = v % 3 == 0 ? AcknowledgeType.ACCEPT : v % 3 == 1 ? AcknowledgeType.RELEASE : AcknowledgeType.REJECT;
          c.acknowledge(r, t);
          if (t == AcknowledgeType.ACCEPT) {
            accepted.add(r.value());
          } else if (t == AcknowledgeType.RELEASE) {
            released.add(r.value());
          }
        }
      }
      assertEquals(12, seen);
      c.commitSync();
      // only the released ones come back, on their second delivery
      List<ConsumerRecord<String, String>> again = pollN(c, released.size(), Duration.ofSeconds(30));
      assertEquals(released, values(again));
      again.forEach(r -> {
        assertEquals(Optional.of((short) 2), r.deliveryCount());
        c.acknowledge(r, AcknowledgeType.ACCEPT);
      });
      c.commitSync();
      assertEquals(List.of(), pollN(c, 1, Duration.ofSeconds(3)), "rejected records are never redelivered");
    }
    assertEquals(4, accepted.size());
  }

  /** The broker's group.share.delivery.count.limit (the suite's cluster runs with 3). */
  static int brokerDeliveryCountLimit() throws Exception {
    String id = String.valueOf(admin.describeCluster().nodes().get().iterator().next().id());
    ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, id);
    ConfigEntry e = admin.describeConfigs(List.of(broker)).all().get(30, TimeUnit.SECONDS).get(broker)
        .get("group.share.delivery.count.limit");
    return Integer.parseInt(e.value());
  }

  /** Release the one record of a new topic on every delivery; the deliveries seen. */
  static List<Short> releaseUntilArchived(String group, String topic) throws Exception {
    List<Short> deliveries = new ArrayList<>();
    try (KafkaShareConsumer<String, String> c = shareConsumer(group, "explicit")) {
      c.subscribe(List.of(topic));
      long quiet = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      while (System.nanoTime() < quiet) {
        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
          deliveries.add(r.deliveryCount().orElse((short) -1));
          c.acknowledge(r, AcknowledgeType.RELEASE);
          c.commitSync();
          quiet = System.nanoTime() + TimeUnit.SECONDS.toNanos(3); // 3 s without one: archived
        }
      }
    }
    return deliveries;
  }

  @Test
  void aRecordReleasedUpToTheDeliveryCountLimitIsArchived() throws Exception {
    int limit = brokerDeliveryCountLimit();
    String topic = createTopic(admin, unique("share-limit"), 1);
    String group = shareGroup("sg-limit");
    Clients.produce(kaas, topic, 1, 1);
    List<Short> want = IntStream.rangeClosed(1, limit).mapToObj(i -> (short) i).toList();
    assertEquals(want, releaseUntilArchived(group, topic));
  }

  @Test
  void theGroupsDeliveryCountLimitOverridesTheBrokers() throws Exception {
    String topic = createTopic(admin, unique("share-glimit"), 1);
    String group = shareGroup("sg-glimit", "share.delivery.count.limit", "2");
    Clients.produce(kaas, topic, 1, 1);
    assertEquals(List.of((short) 1, (short) 2), releaseUntilArchived(group, topic));
  }

  /** Hold one record for {@code ms}, acknowledging RENEW at every poll that presents it. */
  static List<ConsumerRecord<String, String>> renewFor(KafkaShareConsumer<String, String> holder,
      KafkaShareConsumer<String, String> other, List<ConsumerRecord<String, String>> stolen, long ms) {
    List<ConsumerRecord<String, String>> presented = new ArrayList<>();
    long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
    while (System.nanoTime() < end) {
      for (ConsumerRecord<String, String> r : holder.poll(Duration.ofMillis(200))) {
        presented.add(r);
        holder.acknowledge(r, AcknowledgeType.RENEW);
      }
      other.poll(Duration.ofMillis(100)).forEach(stolen::add);
    }
    return presented;
  }

  @Test
  void renewKeepsARecordLockedPastItsLockDuration() throws Exception {
    String topic = createTopic(admin, unique("share-renew"), 1);
    String group = shareGroup("sg-renew", "share.record.lock.duration.ms", "1500");
    Clients.produce(kaas, topic, 1, 1);
    try (KafkaShareConsumer<String, String> holder = shareConsumer(group, "explicit");
        KafkaShareConsumer<String, String> other = shareConsumer(group, "explicit")) {
      holder.subscribe(List.of(topic));
      List<ConsumerRecord<String, String>> first = pollN(holder, 1, Duration.ofSeconds(30));
      assertEquals(range(1), values(first));
      first.forEach(r -> holder.acknowledge(r, AcknowledgeType.RENEW));
      other.subscribe(List.of(topic)); // only now: the record is the holder's
      List<ConsumerRecord<String, String>> stolen = new ArrayList<>();
      List<ConsumerRecord<String, String>> presented = renewFor(holder, other, stolen, 6000);
      assertEquals(List.of(), stolen, "a renewed lock is never released to the other member");
      assertTrue(presented.size() >= 1, "the renewed record is presented again");
      assertTrue(presented.stream().allMatch(r -> r.deliveryCount().equals(Optional.of((short) 1))));
      // the last RENEW presents the record once more: settle it then
      List<ConsumerRecord<String, String>> last = pollN(holder, 1, Duration.ofSeconds(10));
      assertEquals(range(1), values(last));
      holder.acknowledge(last.get(0), AcknowledgeType.ACCEPT);
      Map<?, Optional<org.apache.kafka.common.KafkaException>> ok = holder.commitSync();
      assertTrue(ok.values().stream().allMatch(Optional::isEmpty), ok.toString());
      assertEquals(List.of(), pollN(other, 1, Duration.ofSeconds(3)), "an accepted record is not redelivered");
    }
  }

  @Test
  void renewIsRefusedInAGroupThatDisablesIt() throws Exception {
    String topic = createTopic(admin, unique("share-norenew"), 1);
    String group = shareGroup("sg-norenew", "share.record.lock.duration.ms", "1500",
        "share.renew.acknowledge.enable", "false");
    Clients.produce(kaas, topic, 1, 1);
    try (KafkaShareConsumer<String, String> holder = shareConsumer(group, "explicit");
        KafkaShareConsumer<String, String> other = shareConsumer(group, "explicit")) {
      holder.subscribe(List.of(topic));
      List<ConsumerRecord<String, String>> held = pollN(holder, 1, Duration.ofSeconds(30));
      assertEquals(range(1), values(held));
      held.forEach(r -> holder.acknowledge(r, AcknowledgeType.RENEW));
      Map<?, Optional<org.apache.kafka.common.KafkaException>> got = holder.commitSync();
      assertTrue(got.values().stream().anyMatch(e -> e.isPresent()
          && e.get() instanceof org.apache.kafka.common.errors.InvalidRecordStateException), got.toString());
      // the lock was not renewed: it expires and the other member gets the record again
      other.subscribe(List.of(topic));
      List<ConsumerRecord<String, String>> redelivered = pollN(other, 1, Duration.ofSeconds(30));
      assertEquals(range(1), values(redelivered));
      assertEquals(Optional.of((short) 2), redelivered.get(0).deliveryCount());
    }
  }

  @Test
  void anExpiredLockRedeliversToAnotherMemberWhileTheHolderLives() throws Exception {
    String topic = createTopic(admin, unique("share-lock"), 1);
    String group = shareGroup("sg-lock", "share.record.lock.duration.ms", "1500");
    Clients.produce(kaas, topic, 1, 5);
    try (KafkaShareConsumer<String, String> holder = shareConsumer(group, "explicit");
        KafkaShareConsumer<String, String> other = shareConsumer(group, "explicit")) {
      holder.subscribe(List.of(topic));
      List<ConsumerRecord<String, String>> held = pollN(holder, 5, Duration.ofSeconds(30));
      assertEquals(range(5), values(held));
      assertEquals(Optional.of(1500), holder.acquisitionLockTimeoutMs());
      long t0 = System.nanoTime();
      // holder neither acknowledges nor polls: its locks expire and other gets the records
      other.subscribe(List.of(topic));
      List<ConsumerRecord<String, String>> redelivered = pollN(other, 5, Duration.ofSeconds(30));
      assertEquals(range(5), values(redelivered));
      assertTrue(redelivered.stream().allMatch(r -> r.deliveryCount().equals(Optional.of((short) 2))));
      assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(500), "only after the lock expired");
      redelivered.forEach(r -> other.acknowledge(r, AcknowledgeType.ACCEPT));
      Map<?, Optional<org.apache.kafka.common.KafkaException>> ok = other.commitSync();
      assertTrue(ok.values().stream().allMatch(Optional::isEmpty), ok.toString());
      // the holder's late acknowledgement of records it no longer holds changes nothing
      held.forEach(r -> holder.acknowledge(r, AcknowledgeType.RELEASE));
      holder.commitSync();
      assertEquals(List.of(), pollN(other, 1, Duration.ofSeconds(3)), "nothing is redelivered");
    }
  }

  @Test
  void readCommittedShareGroupSkipsAbortedTransactions() throws Exception {
    String topic = createTopic(admin, unique("share-rc"), 1);
    String group = shareGroup("sg-rc", "share.isolation.level", "read_committed");
    try (KafkaProducer<String, String> p = producer(kaas, ProducerConfig.TRANSACTIONAL_ID_CONFIG, unique("share-tx"))) {
      p.initTransactions();
      p.beginTransaction();
      p.send(new ProducerRecord<>(topic, 0, "k", "aborted")).get();
      p.abortTransaction();
      p.beginTransaction();
      p.send(new ProducerRecord<>(topic, 0, "k", "committed")).get();
      p.commitTransaction();
    }
    try (KafkaShareConsumer<String, String> c = shareConsumer(group, "implicit")) {
      c.subscribe(List.of(topic));
      List<ConsumerRecord<String, String>> got = pollN(c, 1, Duration.ofSeconds(30));
      got.addAll(pollN(c, 1, Duration.ofSeconds(2)));
      assertEquals(Set.of("committed"), values(got));
      assertEquals(1, got.size());
    }
  }

  @Test
  void twoMembersShareThePartitionsAndAcceptEachRecordOnce() throws Exception {
    String topic = createTopic(admin, unique("share-two"), 2);
    String group = shareGroup("sg-two");
    int n = 300;
    List<String> a = new CopyOnWriteArrayList<>();
    List<String> b = new CopyOnWriteArrayList<>();
    try (KafkaShareConsumer<String, String> c1 = shareConsumer(group, "implicit");
        KafkaShareConsumer<String, String> c2 = shareConsumer(group, "implicit");
        KafkaProducer<String, String> p = producer(kaas, ProducerConfig.ACKS_CONFIG, "all")) {
      c1.subscribe(List.of(topic));
      c2.subscribe(List.of(topic));
      // both members are in before anything is produced
      Clients.waitFor(Duration.ofSeconds(30), () -> {
        c1.poll(Duration.ofMillis(100));
        c2.poll(Duration.ofMillis(100));
        try {
          return admin.describeShareGroups(List.of(group)).describedGroups().get(group).get()
              .members().stream().filter(m -> !m.assignment().topicPartitions().isEmpty()).count() == 2;
        } catch (Exception e) {
          return false;
        }
      }, "two assigned members");
      // A member that joined alone holds both partitions until its next heartbeat tells it
      // the group's new assignment: the records go out in steps, both partitions each
      // time, so that every member is sure to have taken some before they run out.
      int sent = 0;
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while (a.size() + b.size() < n && System.nanoTime() < deadline) {
        boolean both = !a.isEmpty() && !b.isEmpty();
        if (sent < n && (both || a.size() + b.size() == sent)) {
          int upto = both ? n : Math.min(n, sent + 2);
          for (; sent < upto; sent++) {
            p.send(new ProducerRecord<>(topic, sent % 2, "k" + sent, String.valueOf(sent)));
          }
          p.flush();
        }
        c1.poll(Duration.ofMillis(100)).forEach(r -> a.add(r.value()));
        c2.poll(Duration.ofMillis(100)).forEach(r -> b.add(r.value()));
      }
      c1.commitSync();
      c2.commitSync();
    }
    List<String> all = new ArrayList<>(a);
    all.addAll(b);
    assertEquals(n, all.size(), "no record twice");
    assertEquals(range(n), new HashSet<>(all));
    assertFalse(a.isEmpty() || b.isEmpty(), "both members consumed: " + a.size() + "/" + b.size());
  }
}
