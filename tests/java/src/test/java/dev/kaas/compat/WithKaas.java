package dev.kaas.compat;

import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolutionException;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * Gives a test (or its {@code @BeforeAll}) the suite's one {@link KaasCluster}: started on first
 * use, kept in the root store so every test class shares it, stopped when the run ends.
 */
public final class WithKaas implements ParameterResolver {
  @Override
  public boolean supportsParameter(ParameterContext pc, ExtensionContext ec) {
    return pc.getParameter().getType() == KaasCluster.class;
  }

  @Override
  public Object resolveParameter(ParameterContext pc, ExtensionContext ec) {
    return ec.getRoot()
        .getStore(ExtensionContext.Namespace.create(WithKaas.class))
        .getOrComputeIfAbsent(
            "cluster",
            k -> {
              try {
                return KaasCluster.fromEnvironment();
              } catch (Exception e) {
                throw new ParameterResolutionException("cannot start or reach kaas: " + e, e);
              }
            },
            KaasCluster.class);
  }
}
