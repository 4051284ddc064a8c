package io.kaas.compat.connect;

import java.util.ArrayList;
import java.util.HashMap;
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
    static final String TASK = "task.index";

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
        List<Map<String, String>> out = new ArrayList<>();
        for (int t = 0; t < maxTasks; t++) {
            Map<String, String> c = new HashMap<>(props);
            c.put(TASK, Integer.toString(t));
            out.add(c);
        }
        return out;
    }

    @Override
    public void stop() {
    }

    @Override
    public ConfigDef config() {
        return CONFIG;
    }
}
