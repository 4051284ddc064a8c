package io.kaas.compat.connect;

import java.util.List;
import java.util.Map;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.sink.SinkConnector;

/** A sink connector whose tasks append every record they are given, with its partition,
 *  offset and the time, to a file of their own in `dir`, and make it durable before the
 *  worker commits the group's offsets (flush): what the group claims consumed must be
 *  in the files. */
public class RecordingSink extends SinkConnector {
    static final String DIR = "dir";
    static final String TASK = TaskConfigs.TASK;

    static final ConfigDef CONFIG = new ConfigDef()
        .define(DIR, ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "The directory of the tasks' files.");

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
        return RecordingSinkTask.class;
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
}
