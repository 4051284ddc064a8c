package dev.kaas.compat;

import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The base of every test class of the suite: the suite's one cluster and an Admin client to
 * it, made before a class's tests and closed after them (the classes run one after another).
 */
@ExtendWith(WithKaas.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
abstract class OnKaas {
  static KaasCluster kaas;
  static Admin admin;

  @BeforeAll
  static void setUp(KaasCluster c) {
    kaas = c;
    admin = c.admin();
  }

  @AfterAll
  static void tearDown() {
    admin.close();
  }
}
