package dev.kaas.compat;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.Node;

/**
 * The 3-broker kaas cluster the suite runs against: {@code kaas cluster} started as a
 * subprocess on free ports in a temporary directory, or the cluster named by the environment.
 *
 * <ul>
 *   <li>{@code KAAS_BOOTSTRAP}: use this running cluster (nothing is started); {@code KAAS_DATA}
 *       names its data directory, which the tests that kill a broker need (they are skipped
 *       without it).
 *   <li>{@code KAAS_BIN}: the {@code kaas} executable (default: {@code .venv/bin/kaas} of the
 *       repository this directory is in).
 * </ul>
 */
public final class KaasCluster implements AutoCloseable {
  public static final int BROKERS = 3;

  /**
   * The brokers' options when the suite starts the cluster: {@code broker-args.txt} beside
   * pom.xml (one per line, {@code #} comments), which the pytest wrapper reads too.
   */
  static List<String> brokerArgs() throws IOException {
    Path file = Path.of(System.getProperty("kaas.brokerArgs", "broker-args.txt"));
    return Files.readAllLines(file).stream()
        .map(String::strip)
        .filter(l -> !l.isEmpty() && !l.startsWith("#"))
        .toList();
  }

  private final String bootstrap;
  private final Path data; // null: a cluster given by KAAS_BOOTSTRAP without KAAS_DATA
  private final Process process; // null: not ours
  private final Path root; // null: not ours

  private KaasCluster(String bootstrap, Path data, Process process, Path root) {
    this.bootstrap = bootstrap;
    this.data = data;
    this.process = process;
    this.root = root;
  }

  public String bootstrap() {
    return bootstrap;
  }

  public boolean started() {
    return process != null;
  }

  /** The cluster's data directory, when known (it holds the brokers' pid files). */
  public Optional<Path> data() {
    return Optional.ofNullable(data);
  }

  static KaasCluster fromEnvironment() throws Exception {
    String given = System.getenv("KAAS_BOOTSTRAP");
    if (given != null && !given.isBlank()) {
      String d = System.getenv("KAAS_DATA");
      KaasCluster c = new KaasCluster(given, d == null || d.isBlank() ? null : Path.of(d), null, null);
      c.awaitReady(Duration.ofSeconds(60));
      return c;
    }
    return start();
  }

  private static Path kaasBin() {
    String bin = System.getenv("KAAS_BIN");
    if (bin != null && !bin.isBlank()) {
      return Path.of(bin);
    }
    for (Path dir = Path.of("").toAbsolutePath(); dir != null; dir = dir.getParent()) {
      Path candidate = dir.resolve(".venv/bin/kaas");
      if (Files.isExecutable(candidate)) {
        return candidate;
      }
    }
    throw new IllegalStateException(
        "no kaas executable: run `make install` in the repository or set KAAS_BIN (or KAAS_BOOTSTRAP)");
  }

  private static Path tempRoot() throws IOException {
    Path shm = Path.of("/dev/shm");
    if (Files.isDirectory(shm) && Files.isWritable(shm)) {
      return Files.createTempDirectory(shm, "kaas-java-");
    }
    return Files.createTempDirectory("kaas-java-");
  }

  /** A base port with {@link #BROKERS} consecutive ports free on 127.0.0.1. */
  private static int freeBasePort() throws IOException {
    InetAddress lo = InetAddress.getLoopbackAddress();
    for (int attempt = 0; attempt < 200; attempt++) {
      int base = ThreadLocalRandom.current().nextInt(20_000, 40_000);
      boolean free = true;
      for (int i = 0; i < BROKERS && free; i++) {
        try (ServerSocket s = new ServerSocket(base + i, 1, lo)) {
          s.setReuseAddress(true);
        } catch (IOException busy) {
          free = false;
        }
      }
      if (free) {
        return base;
      }
    }
    throw new IOException("no " + BROKERS + " consecutive free ports found");
  }

  static KaasCluster start() throws Exception {
    Path root = tempRoot();
    Path data = root.resolve("data");
    int base = freeBasePort();
    List<String> cmd = new ArrayList<>();
    cmd.add(kaasBin().toString());
    cmd.addAll(
        List.of(
            "cluster", "--brokers", String.valueOf(BROKERS), "--data", data.toString(),
            "--base-port", String.valueOf(base), "--restart-delay", "0.5", "--fork-brokers", "--"));
    cmd.addAll(brokerArgs());
    ProcessBuilder pb = new ProcessBuilder(cmd);
    // the transaction reaper every 0.5 s (kaas.testing's clusters do the same): a
    // transaction whose coordinator died, or that timed out, completes within a test's patience
    pb.environment().put("KAAS_TXN_SWEEP_MS", "500");
    pb.redirectErrorStream(true);
    pb.redirectOutput(root.resolve("supervisor.log").toFile());
    Process p = pb.start();
    StringBuilder bs = new StringBuilder();
    for (int i = 0; i < BROKERS; i++) {
      bs.append(i == 0 ? "" : ",").append("127.0.0.1:").append(base + i);
    }
    KaasCluster c = new KaasCluster(bs.toString(), data, p, root);
    Runtime.getRuntime().addShutdownHook(new Thread(c::stopProcess));
    try {
      c.awaitReady(Duration.ofSeconds(90));
    } catch (Exception e) {
      String log = Files.exists(root.resolve("supervisor.log")) ? Files.readString(root.resolve("supervisor.log")) : "";
      c.close();
      throw new IllegalStateException("kaas cluster did not become ready: " + e + "\n" + log, e);
    }
    return c;
  }

  /** Every broker is in DescribeCluster's answer. */
  void awaitReady(Duration timeout) throws Exception {
    long deadline = System.nanoTime() + timeout.toNanos();
    Exception last = null;
    while (System.nanoTime() < deadline) {
      if (process != null && !process.isAlive()) {
        throw new IllegalStateException("kaas cluster exited with " + process.exitValue());
      }
      try (Admin admin = admin()) {
        int n = admin.describeCluster().nodes().get(5, TimeUnit.SECONDS).size();
        if (n >= BROKERS) {
          return;
        }
      } catch (Exception e) {
        last = e;
      }
      Thread.sleep(200);
    }
    throw new IllegalStateException("not ready in " + timeout, last);
  }

  public Admin admin() {
    Properties p = new Properties();
    p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30_000);
    p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000);
    return Admin.create(p);
  }

  /** The pid of broker {@code id}, from the supervisor's pid file. */
  public long brokerPid(int id) throws IOException {
    Path pidFile = data().orElseThrow().resolve("run").resolve("kaas-" + id + ".pid");
    return Long.parseLong(Files.readString(pidFile).trim());
  }

  /**
   * SIGKILL broker {@code id}; the supervisor restarts it. Returns once a new process serves
   * (a new pid in the pid file, and the cluster whole again).
   */
  public void killBroker(int id) throws Exception {
    long pid = brokerPid(id);
    ProcessHandle.of(pid).ifPresent(ProcessHandle::destroyForcibly);
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (System.nanoTime() < deadline) {
      try {
        if (brokerPid(id) != pid) {
          break;
        }
      } catch (IOException | NumberFormatException racing) {
        // the supervisor is rewriting it
      }
      Thread.sleep(50);
    }
  }

  /** The id of the broker leading {@code topic}'s partition {@code partition}. */
  public int leaderOf(Admin admin, String topic, int partition) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (true) {
      TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
      Node leader = d.partitions().get(partition).leader();
      if (leader != null && leader.id() >= 0) {
        return leader.id();
      }
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException(topic + "-" + partition + " has no leader");
      }
      Thread.sleep(100);
    }
  }

  private void stopProcess() {
    if (process == null || !process.isAlive()) {
      return;
    }
    List<ProcessHandle> tree = process.descendants().toList();
    process.destroy(); // SIGTERM: the supervisor drains and stops its brokers
    try {
      if (!process.waitFor(30, TimeUnit.SECONDS)) {
        process.destroyForcibly();
        process.waitFor(5, TimeUnit.SECONDS);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    tree.forEach(ProcessHandle::destroyForcibly);
  }

  @Override
  public void close() throws IOException {
    stopProcess();
    if (root != null && !"1".equals(System.getenv("KAAS_KEEP_DATA"))) {
      try (Stream<Path> walk = Files.walk(root)) {
        walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      }
    }
  }

  @Override
  public String toString() {
    return "kaas cluster at " + bootstrap + (data != null ? " (data " + data + ")" : "");
  }
}
