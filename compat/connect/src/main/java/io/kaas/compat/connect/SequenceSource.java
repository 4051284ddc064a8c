package io.kaas.compat.connect;

import java.util.List;
import java.util.Map;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.source.ConnectorTransactionBoundaries;
import org.apache.kafka.connect.source.ExactlyOnceSupport;
import org.apache.kafka.connect.source.SourceConnector;

/** A source connector with exactly-once support (KIP-618) that counts: the numbers
 *  0..count-1 written to one topic, task t of n writing t, t+n, t+2n, ... Each task's
 *  source partition is {"task": t} and its offset {"next": the next number it writes},
 *  so a task started again resumes where its last committed transaction ended. It can
 *  define its transactions (transaction.boundary=connector: one per `batch` records). */
public class SequenceSource extends SourceConnector {
    static final String TOPIC = "topic";
    static final String COUNT = "count";
    static final String RATE = "rate";
    static final String BATCH = "batch";
    static final String TASK = TaskConfigs.TASK;
    static final String TASKS = TaskConfigs.TASKS;

    static final ConfigDef CONFIG = new ConfigDef()
        .define(TOPIC, ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "The topic to write the numbers to.")
        .define(COUNT, ConfigDef.Type.LONG, ConfigDef.NO_DEFAULT_VALUE, ConfigDef.Range.atLeast(0),
                ConfigDef.Importance.HIGH, "How many numbers to write, from 0, over all tasks.")
        .define(RATE, ConfigDef.Type.INT, 500, ConfigDef.Range.atLeast(1), ConfigDef.Importance.MEDIUM,
                "Numbers per second per task, at most.")
        .define(BATCH, ConfigDef.Type.INT, 100, ConfigDef.Range.atLeast(1), ConfigDef.Importance.MEDIUM,
                "With transaction.boundary=connector: numbers per transaction.");

    private Map<String, String> props;

    @Override
    public String version() {
        return "1";
    }

    @Override
    public void start(Map<String, String> props) {
        this.props = props;
    }

    @Override
    public Class<? extends Task> taskClass() {
        return SequenceSourceTask.class;
    }

    @Override
    public List<Map<String, String>> taskConfigs(int maxTasks) {
        return TaskConfigs.numbered(props, maxTasks);
    }

    @Override
    public void stop() {
    }

    @Override
    public ConfigDef config() {
        return CONFIG;
    }

    @Override
    public ExactlyOnceSupport exactlyOnceSupport(Map<String, String> config) {
        return ExactlyOnceSupport.SUPPORTED;
    }

    @Override
    public ConnectorTransactionBoundaries canDefineTransactionBoundaries(Map<String, String> config) {
        return ConnectorTransactionBoundaries.SUPPORTED;
    }
}
