package dev.kaas.compat;

import static dev.kaas.compat.Clients.consumer;
import static dev.kaas.compat.Clients.createTopic;
import static dev.kaas.compat.Clients.pollN;
import static dev.kaas.compat.Clients.producer;
import static dev.kaas.compat.Clients.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/** Admin methods of Kafka 4.4 that map to APIs kaas serves, and what it answers for the rest. */
class AdminTest extends OnKaas {
  static <T> T get(org.apache.kafka.common.KafkaFuture<T> f) throws Exception {
    return f.get(30, TimeUnit.SECONDS);
  }

  static Throwable cause(Executable e) {
    ExecutionException ex = assertThrows(ExecutionException.class, e);
    return ex.getCause();
  }

  @Test
  void topicsCreateListDescribeGrowDelete() throws Exception {
    String t = unique("adm-topic");
    // validate only: nothing is created
    get(admin.createTopics(List.of(new NewTopic(t, 2, (short) 1)), new CreateTopicsOptions().validateOnly(true)).all());
    assertFalse(get(admin.listTopics().names()).contains(t));
    var created = admin.createTopics(List.of(new NewTopic(t, 2, (short) 1).configs(Map.of("retention.ms", "123456"))));
    get(created.all());
    assertEquals(2, get(created.numPartitions(t)));
    assertEquals("123456", get(created.config(t)).get("retention.ms").value());
    assertInstanceOf(TopicExistsException.class,
        cause(() -> admin.createTopics(List.of(new NewTopic(t, 1, (short) 1))).all().get()));
    assertTrue(get(admin.listTopics().names()).contains(t));
    TopicDescription d = get(admin.describeTopics(List.of(t)).allTopicNames()).get(t);
    assertEquals(2, d.partitions().size());
    assertFalse(d.topicId().toString().isEmpty());
    TopicDescription byId = get(admin.describeTopics(
        org.apache.kafka.common.TopicCollection.ofTopicIds(List.of(d.topicId()))).allTopicIds()).get(d.topicId());
    assertEquals(t, byId.name());
    assertEquals(2, byId.partitions().size());
    get(admin.createPartitions(Map.of(t, NewPartitions.increaseTo(4))).all());
    Clients.waitFor(Duration.ofSeconds(30), () -> {
      try {
        return get(admin.describeTopics(List.of(t)).allTopicNames()).get(t).partitions().size() == 4;
      } catch (Exception e) {
        return false;
      }
    }, "4 partitions");
    get(admin.deleteTopics(List.of(t)).all());
    Clients.waitFor(Duration.ofSeconds(30), () -> {
      try {
        return !get(admin.listTopics().names()).contains(t);
      } catch (Exception e) {
        return false;
      }
    }, "the topic gone");
    assertInstanceOf(UnknownTopicOrPartitionException.class,
        cause(() -> admin.describeTopics(List.of(t)).allTopicNames().get()));
  }

  @Test
  void topicAndBrokerConfigsDescribeAndIncrementalAlter() throws Exception {
    String t = createTopic(admin, unique("adm-cfg"), 1);
    ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, t);
    get(admin.incrementalAlterConfigs(Map.of(res, List.of(
        new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET),
        new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND)))).all());
    Config c = get(admin.describeConfigs(List.of(res)).all()).get(res);
    assertEquals("3600000", c.get("retention.ms").value());
    assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, c.get("retention.ms").source());
    assertTrue(c.get("cleanup.policy").value().contains("compact"), c.get("cleanup.policy").value());
    get(admin.incrementalAlterConfigs(Map.of(res, List.of(
        new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE)))).all());
    c = get(admin.describeConfigs(List.of(res)).all()).get(res);
    assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, c.get("retention.ms").source());
    // an invalid value is refused
    assertTrue(cause(() -> admin.incrementalAlterConfigs(Map.of(res, List.of(
        new AlterConfigOp(new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET)))).all().get())
        instanceof org.apache.kafka.common.errors.InvalidConfigurationException);
    DescribeClusterResult cluster = admin.describeCluster();
    String id = String.valueOf(get(cluster.nodes()).iterator().next().id());
    ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, id);
    Config bc = get(admin.describeConfigs(List.of(broker)).all()).get(broker);
    assertTrue(bc.entries().size() > 10, "broker configs: " + bc.entries().size());
    assertEquals("3", bc.get("group.share.delivery.count.limit").value());
  }

  @Test
  void clusterAndFeatures() throws Exception {
    DescribeClusterResult c = admin.describeCluster();
    assertEquals(KaasCluster.BROKERS, get(c.nodes()).size());
    assertFalse(get(c.clusterId()).isEmpty());
    assertTrue(get(c.nodes()).contains(get(c.controller())));
    var features = get(admin.describeFeatures().featureMetadata());
    // a new cluster finalizes transaction.version 2, as a new Apache 4.4 cluster does
    assertEquals(2, features.finalizedFeatures().get("transaction.version").maxVersionLevel());
    assertEquals(2, features.supportedFeatures().get("transaction.version").maxVersion());
  }

  @Test
  void consumerGroupsListDescribeOffsetsAndDelete() throws Exception {
    String t = createTopic(admin, unique("adm-grp"), 2);
    Clients.produce(kaas, t, 2, 10);
    String classic = unique("adm-classic");
    String modern = unique("adm-modern");
    TopicPartition p0 = new TopicPartition(t, 0);
    TopicPartition p1 = new TopicPartition(t, 1);
    ConsumerGroupTest.kaas = kaas;
    try (KafkaConsumer<String, String> a = ConsumerGroupTest.member("classic", classic);
        KafkaConsumer<String, String> b = consumer(kaas, modern, ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer")) {
      a.subscribe(List.of(t));
      b.subscribe(List.of(t));
      assertEquals(10, pollN(a, 10, Duration.ofSeconds(60)).size());
      assertEquals(10, pollN(b, 10, Duration.ofSeconds(60)).size());
      a.commitSync();
      b.commitSync();
      Collection<GroupListing> listed = get(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all());
      Map<String, GroupListing> byId = listed.stream().collect(Collectors.toMap(GroupListing::groupId, g -> g));
      assertEquals(Optional.of(GroupType.CLASSIC), byId.get(classic).type());
      assertEquals(Optional.of(GroupType.CONSUMER), byId.get(modern).type());
      assertEquals(Optional.of(GroupState.STABLE), byId.get(modern).groupState());
      Map<String, ConsumerGroupDescription> ds = get(admin.describeConsumerGroups(List.of(classic, modern)).all());
      assertEquals(1, ds.get(classic).members().size());
      assertEquals(Set.of(p0, p1), ds.get(modern).members().iterator().next().assignment().topicPartitions());
      var classicDesc = get(admin.describeClassicGroups(List.of(classic)).all()).get(classic);
      assertEquals("consumer", classicDesc.protocol());
      assertEquals(1, classicDesc.members().size());
      Map<TopicPartition, Long> committed = get(admin.listConsumerGroupOffsets(modern).partitionsToOffsetAndMetadata())
          .entrySet().stream().collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()));
      assertEquals(Map.of(p0, 5L, p1, 5L), committed);
      // remove the classic member by the admin: the group is empty
      get(admin.removeMembersFromConsumerGroup(classic, new RemoveMembersFromConsumerGroupOptions()).all());
    }
    // offsets of an empty group: alter, delete one partition's, then delete the group
    get(admin.alterConsumerGroupOffsets(classic, Map.of(p0, new OffsetAndMetadata(2, "reset"))).all());
    assertEquals(2, get(admin.listConsumerGroupOffsets(classic).partitionsToOffsetAndMetadata()).get(p0).offset());
    get(admin.deleteConsumerGroupOffsets(classic, Set.of(p1)).all());
    assertEquals(Set.of(p0), get(admin.listConsumerGroupOffsets(classic).partitionsToOffsetAndMetadata()).keySet());
    get(admin.deleteConsumerGroups(List.of(classic, modern)).all());
    Set<String> left = get(admin.listGroups().all()).stream().map(GroupListing::groupId).collect(Collectors.toSet());
    assertFalse(left.contains(classic) || left.contains(modern), left.toString());
  }

  @Test
  void shareGroupsDescribeOffsetsAlterAndDelete() throws Exception {
    ShareConsumerTest.kaas = kaas;
    ShareConsumerTest.admin = admin;
    String t = createTopic(admin, unique("adm-share"), 1);
    String g = ShareConsumerTest.shareGroup("adm-sg");
    Clients.produce(kaas, t, 1, 10);
    TopicPartition p0 = new TopicPartition(t, 0);
    try (var c = ShareConsumerTest.shareConsumer(g, "implicit")) {
      c.subscribe(List.of(t));
      assertEquals(10, ShareConsumerTest.pollN(c, 10, Duration.ofSeconds(60)).size());
      c.commitSync();
      var d = get(admin.describeShareGroups(List.of(g)).all()).get(g);
      assertEquals(GroupState.STABLE, d.groupState());
      assertEquals(1, d.members().size());
      assertEquals(Set.of(p0), d.members().iterator().next().assignment().topicPartitions());
      Set<String> shareGroups = get(admin.listGroups(ListGroupsOptions.forShareGroups()).all()).stream()
          .map(GroupListing::groupId).collect(Collectors.toSet());
      assertTrue(shareGroups.contains(g));
    }
    var spec = Map.of(g, new org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec());
    assertEquals(10, get(admin.listShareGroupOffsets(spec).partitionsToOffsetInfo(g)).get(p0).startOffset());
    // the group is empty now: its offsets may be reset
    Clients.waitFor(Duration.ofSeconds(30), () -> {
      try {
        return get(admin.describeShareGroups(List.of(g)).all()).get(g).groupState() == GroupState.EMPTY;
      } catch (Exception e) {
        return false;
      }
    }, "the share group empty");
    get(admin.alterShareGroupOffsets(g, Map.of(p0, 4L)).all());
    assertEquals(4, get(admin.listShareGroupOffsets(spec).partitionsToOffsetInfo(g)).get(p0).startOffset());
    try (var c = ShareConsumerTest.shareConsumer(g, "implicit")) {
      c.subscribe(List.of(t));
      assertEquals(6, ShareConsumerTest.pollN(c, 6, Duration.ofSeconds(60)).size(), "re-read from offset 4");
      c.commitSync();
    }
    Clients.waitFor(Duration.ofSeconds(30), () -> {
      try {
        return get(admin.describeShareGroups(List.of(g)).all()).get(g).groupState() == GroupState.EMPTY;
      } catch (Exception e) {
        return false;
      }
    }, "the share group empty again");
    get(admin.deleteShareGroupOffsets(g, Set.of(t)).all());
    assertFalse(get(admin.listShareGroupOffsets(spec).partitionsToOffsetInfo(g)).containsKey(p0)
        && get(admin.listShareGroupOffsets(spec).partitionsToOffsetInfo(g)).get(p0) != null);
    get(admin.deleteShareGroups(List.of(g)).all());
    Set<String> left = get(admin.listGroups().all()).stream().map(GroupListing::groupId).collect(Collectors.toSet());
    assertFalse(left.contains(g));
  }

  @Test
  void offsetsListAndRecordsDeletion() throws Exception {
    String t = createTopic(admin, unique("adm-offsets"), 1);
    TopicPartition tp = new TopicPartition(t, 0);
    long base = System.currentTimeMillis() - 100_000;
    try (KafkaProducer<String, String> p = producer(kaas)) {
      for (int i = 0; i < 10; i++) {
        p.send(new ProducerRecord<>(t, 0, base + i * 1000L, "k", "v" + i));
      }
      p.flush();
    }
    Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> r;
    r = get(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all());
    assertEquals(0, r.get(tp).offset());
    r = get(admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all());
    assertEquals(10, r.get(tp).offset());
    r = get(admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).all());
    assertEquals(9, r.get(tp).offset());
    assertEquals(base + 9000, r.get(tp).timestamp());
    r = get(admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(base + 4500))).all());
    assertEquals(5, r.get(tp).offset());
    var deleted = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4))).lowWatermarks().get(tp);
    assertEquals(4, get(deleted).lowWatermark());
    r = get(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all());
    assertEquals(4, r.get(tp).offset());
    try (KafkaConsumer<String, String> c = consumer(kaas, null)) {
      c.assign(List.of(tp));
      c.seekToBeginning(List.of(tp));
      assertEquals("v4", pollN(c, 1, Duration.ofSeconds(30)).get(0).value());
    }
  }

  @Test
  void transactionsListDescribeAbortAndFence() throws Exception {
    String t = createTopic(admin, unique("adm-tx"), 1);
    TopicPartition tp = new TopicPartition(t, 0);
    String tid = unique("adm-tid");
    KafkaProducer<String, String> p = producer(kaas, ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid);
    try {
      p.initTransactions();
      p.beginTransaction();
      RecordMetadata md = p.send(new ProducerRecord<>(t, 0, "k", "hanging")).get();
      TransactionDescription d = get(admin.describeTransactions(List.of(tid)).description(tid));
      assertEquals(TransactionState.ONGOING, d.state());
      assertEquals(Set.of(tp), d.topicPartitions());
      // filters: state, producer id, running at least 0 ms, the id pattern
      Collection<TransactionListing> byState = get(admin.listTransactions(
          new ListTransactionsOptions().filterStates(List.of(TransactionState.ONGOING))).all());
      assertTrue(byState.stream().anyMatch(l -> l.transactionalId().equals(tid)));
      Collection<TransactionListing> byPid = get(admin.listTransactions(
          new ListTransactionsOptions().filterProducerIds(Set.of(d.producerId()))).all());
      assertEquals(List.of(tid), byPid.stream().map(TransactionListing::transactionalId).toList());
      Collection<TransactionListing> byPattern = get(admin.listTransactions(
          new ListTransactionsOptions().filterOnTransactionalIdPattern(tid.substring(0, 6) + ".*")).all());
      assertTrue(byPattern.stream().anyMatch(l -> l.transactionalId().equals(tid)));
      Collection<TransactionListing> byDuration = get(admin.listTransactions(
          new ListTransactionsOptions().filterOnDuration(3_600_000)).all());
      assertFalse(byDuration.stream().anyMatch(l -> l.transactionalId().equals(tid)), "not running for an hour");
      // the partition's producers: the open transaction's first offset
      var producers = get(admin.describeProducers(List.of(tp)).partitionResult(tp)).activeProducers();
      ProducerState ps = producers.stream().filter(s -> s.producerId() == d.producerId()).findFirst().orElseThrow();
      assertEquals(Optional.of(md.offset()), ps.currentTransactionStartOffset().stream().boxed().findFirst());
      // abort it from the admin, as kafka-transactions --abort does (WriteTxnMarkers to the leader)
      get(admin.abortTransaction(new AbortTransactionSpec(tp, ps.producerId(), (short) ps.producerEpoch(),
          ps.coordinatorEpoch().orElse(-1))).all());
      Clients.waitFor(Duration.ofSeconds(30), () -> {
        try {
          return get(admin.describeProducers(List.of(tp)).partitionResult(tp)).activeProducers().stream()
              .allMatch(s -> s.currentTransactionStartOffset().isEmpty());
        } catch (Exception e) {
          return false;
        }
      }, "the hanging transaction aborted");
      try (KafkaConsumer<String, String> c = consumer(kaas, null, ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed")) {
        assertEquals(2L, c.endOffsets(List.of(tp)).get(tp), "the last stable offset passed the abort marker");
      }
      // fence the producer: its next transaction fails
      get(admin.fenceProducers(List.of(tid)).all());
      assertThrows(Exception.class, () -> {
        p.beginTransaction();
        p.send(new ProducerRecord<>(t, 0, "k", "fenced")).get();
        p.commitTransaction();
      });
    } finally {
      p.close(Duration.ofSeconds(5));
    }
  }

  @Test
  void forceTerminateTransactionAbortsTheOpenTransaction() throws Exception {
    String t = createTopic(admin, unique("adm-force"), 1);
    TopicPartition tp = new TopicPartition(t, 0);
    String tid = unique("adm-force-tid");
    try (KafkaProducer<String, String> p = producer(kaas, ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid)) {
      p.initTransactions();
      p.beginTransaction();
      p.send(new ProducerRecord<>(t, 0, "k", "open")).get();
      get(admin.forceTerminateTransaction(tid).result());
      // as after InitProducerId: the open transaction aborted, the id left EMPTY with a new epoch
      java.util.concurrent.atomic.AtomicReference<Object> last = new java.util.concurrent.atomic.AtomicReference<>();
      try {
        Clients.waitFor(Duration.ofSeconds(30), () -> {
          try {
            TransactionDescription d = get(admin.describeTransactions(List.of(tid)).description(tid));
            last.set(d);
            return d.state() == TransactionState.EMPTY || d.state() == TransactionState.COMPLETE_ABORT;
          } catch (Exception e) {
            last.set(e);
            return false;
          }
        }, "the transaction aborted");
      } catch (AssertionError e) {
        throw new AssertionError(e.getMessage() + "; last: " + last.get(), e);
      }
      assertThrows(Exception.class, p::commitTransaction);
    }
    try (KafkaConsumer<String, String> c = consumer(kaas, null, ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed")) {
      assertEquals(2L, c.endOffsets(List.of(tp)).get(tp), "the abort marker ends it");
      c.assign(List.of(tp));
      c.seekToBeginning(List.of(tp));
      assertEquals(List.of(), Clients.pollFor(c, Duration.ofSeconds(2)));
    }
  }

  @Test
  void aclsCreateDescribeDelete() throws Exception {
    String t = unique("adm-acl");
    AclBinding read = new AclBinding(new ResourcePattern(ResourceType.TOPIC, t, PatternType.LITERAL),
        new AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW));
    AclBinding prefixed = new AclBinding(new ResourcePattern(ResourceType.GROUP, t, PatternType.PREFIXED),
        new AccessControlEntry("User:alice", "*", AclOperation.ALL, AclPermissionType.DENY));
    get(admin.createAcls(List.of(read, prefixed)).all());
    AclBindingFilter alice = new AclBindingFilter(ResourcePatternFilter.ANY,
        new AccessControlEntryFilter("User:alice", null, AclOperation.ANY, AclPermissionType.ANY));
    Clients.waitFor(Duration.ofSeconds(10), () -> {
      try {
        return get(admin.describeAcls(alice).values()).containsAll(List.of(read, prefixed));
      } catch (Exception e) {
        return false;
      }
    }, "both ACLs described");
    Collection<AclBinding> gone = get(admin.deleteAcls(List.of(read.toFilter())).all());
    assertEquals(List.of(read), List.copyOf(gone));
    // every broker reads the ACL file when it changes: a describe at another may land before
    Clients.waitFor(Duration.ofSeconds(10), () -> {
      try {
        Collection<AclBinding> rest = get(admin.describeAcls(alice).values());
        return !rest.contains(read) && rest.contains(prefixed);
      } catch (Exception e) {
        return false;
      }
    }, "only the prefixed ACL left");
    get(admin.deleteAcls(List.of(prefixed.toFilter())).all());
  }

  /** The user's credentials as a broker describes them, once they equal {@code want}. */
  static void awaitCredentials(String user, Set<ScramCredentialInfo> want) throws Exception {
    long t0 = System.nanoTime();
    Set<ScramCredentialInfo> got = null;
    while (System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(10)) {
      try {
        got = Set.copyOf(get(admin.describeUserScramCredentials(List.of(user)).description(user)).credentialInfos());
      } catch (ExecutionException e) {
        got = Set.of(); // not there (yet)
      }
      if (got.equals(want)) {
        return;
      }
      Thread.sleep(50);
    }
    assertEquals(want, got, "credentials of " + user + " after 10 s");
  }

  @Test
  void scramCredentialsUpsertDescribeDelete() throws Exception {
    String user = unique("adm-user");
    // one alteration of a user per request: Apache refuses two with DUPLICATE_RESOURCE
    get(admin.alterUserScramCredentials(List.of(
        new UserScramCredentialUpsertion(user, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), "pw1")))
        .all());
    get(admin.alterUserScramCredentials(List.of(
        new UserScramCredentialUpsertion(user, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), "pw2")))
        .all());
    ExecutionException twice = assertThrows(ExecutionException.class, () -> get(admin.alterUserScramCredentials(
        List.of(new UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256),
            new UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512))).all()));
    assertTrue(twice.getCause() instanceof org.apache.kafka.common.errors.DuplicateResourceException,
        String.valueOf(twice.getCause()));
    // the brokers read the credentials file when it changes: a describe may land before
    awaitCredentials(user, Set.of(new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
        new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)));
    get(admin.alterUserScramCredentials(List.of(
        new UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256))).all());
    awaitCredentials(user, Set.of(new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)));
    Clients.waitFor(Duration.ofSeconds(10), () -> {
      try {
        return get(admin.describeUserScramCredentials().users()).contains(user);
      } catch (Exception e) {
        return false;
      }
    }, user + " among every user described");
  }

  /** Admin methods whose APIs kaas does not serve: each fails with UnsupportedVersionException. */
  @Test
  void methodsOfApisKaasDoesNotServeFailAsUnsupported() throws Exception {
    String t = createTopic(admin, unique("adm-unsupported"), 1);
    TopicPartition tp = new TopicPartition(t, 0);
    Map<String, Executable> calls = new java.util.LinkedHashMap<>();
    calls.put("describeMetadataQuorum", () -> admin.describeMetadataQuorum().quorumInfo().get());
    calls.put("describeDelegationToken", () -> admin.describeDelegationToken().delegationTokens().get());
    calls.put("createDelegationToken", () -> admin.createDelegationToken().delegationToken().get());
    calls.put("alterReplicaLogDirs", () -> admin.alterReplicaLogDirs(
        Map.of(new org.apache.kafka.common.TopicPartitionReplica(t, 0, 0), "/nowhere")).all().get());
    calls.put("listConfigResources", () -> admin.listConfigResources().all().get());
    calls.put("describeStreamsGroups", () -> admin.describeStreamsGroups(List.of("sg")).all().get());
    calls.put("unregisterBroker", () -> admin.unregisterBroker(7).all().get());
    Map<String, String> wrong = new java.util.TreeMap<>();
    for (var e : calls.entrySet()) {
      try {
        e.getValue().execute();
        wrong.put(e.getKey(), "succeeded");
      } catch (ExecutionException ex) {
        if (!(ex.getCause() instanceof UnsupportedVersionException)) {
          wrong.put(e.getKey(), String.valueOf(ex.getCause()));
        }
      } catch (Throwable other) {
        wrong.put(e.getKey(), String.valueOf(other));
      }
    }
    assertEquals(Map.of(), wrong, "methods that did not fail as unsupported");
  }

  /** Admin methods of the placement, quota and feature APIs kaas serves: each answers as Apache's would. */
  @Test
  void placementQuotaAndFeatureMethodsAnswerAsApache() throws Exception {
    String t = createTopic(admin, unique("adm-served"), 1);
    TopicPartition tp = new TopicPartition(t, 0);
    var dirs = admin.describeLogDirs(List.of(0, 1, 2)).allDescriptions().get();
    assertEquals(Set.of(0, 1, 2), dirs.keySet(), "every broker describes its log dir");
    long holders = dirs.values().stream().filter(m -> m.values().stream()
        .anyMatch(d -> d.replicaInfos().containsKey(tp))).count();
    assertEquals(1, holders, "the partition is listed once, by its leader");
    var replica = admin.describeReplicaLogDirs(List.of(new org.apache.kafka.common.TopicPartitionReplica(t, 0, 0)))
        .all().get();
    assertEquals(1, replica.size());
    ExecutionException notNeeded = assertThrows(ExecutionException.class, () -> admin.electLeaders(
        org.apache.kafka.common.ElectionType.PREFERRED, Set.of(tp)).all().get());
    assertTrue(notNeeded.getCause() instanceof org.apache.kafka.common.errors.ElectionNotNeededException,
        String.valueOf(notNeeded.getCause()));
    admin.alterPartitionReassignments(Map.of(tp, Optional.of(
        new org.apache.kafka.clients.admin.NewPartitionReassignment(List.of(1))))).all().get();
    admin.listPartitionReassignments().reassignments().get();
    var entity = new org.apache.kafka.common.quota.ClientQuotaEntity(Map.of("user", unique("u")));
    admin.alterClientQuotas(List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration(entity,
        List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("producer_byte_rate", 1000.0))))).all().get();
    admin.describeClientQuotas(org.apache.kafka.common.quota.ClientQuotaFilter.all()).entities().get();
    ExecutionException refused = assertThrows(ExecutionException.class, () -> admin.updateFeatures(
        Map.of("transaction.version", new org.apache.kafka.clients.admin.FeatureUpdate((short) 3,
            org.apache.kafka.clients.admin.FeatureUpdate.UpgradeType.UPGRADE)),
        new org.apache.kafka.clients.admin.UpdateFeaturesOptions()).all().get());
    assertTrue(refused.getCause() instanceof org.apache.kafka.common.errors.InvalidUpdateVersionException,
        String.valueOf(refused.getCause()));
  }
}
