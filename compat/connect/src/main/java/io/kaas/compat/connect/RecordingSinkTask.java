package io.kaas.compat.connect;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Collection;
import java.util.Map;
import java.util.UUID;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTask;

/** Appends "topic TAB partition TAB offset TAB value TAB epoch-ms" per record to
 *  sink-TASK-UUID.log (a new file per start); flush writes it through and fsyncs it. */
public class RecordingSinkTask extends SinkTask {
    private FileOutputStream file;
    private Writer out;
    private int task;

    @Override
    public String version() {
        return "1";
    }

    @Override
    public void start(Map<String, String> props) {
        task = Integer.parseInt(props.get(RecordingSink.TASK));
        String name = "sink-" + task + "-" + UUID.randomUUID() + ".log";
        try {
            file = new FileOutputStream(Path.of(props.get(RecordingSink.DIR), name).toFile(), true);
        } catch (IOException e) {
            throw new ConnectException("cannot open " + name, e);
        }
        out = new OutputStreamWriter(file, StandardCharsets.UTF_8);
        Events.emit("sink-start", "task", task, "file", name);
    }

    @Override
    public void open(Collection<TopicPartition> partitions) {
        Events.emit("sink-open", "task", task, "partitions", Events.names(partitions));
    }

    @Override
    public void put(Collection<SinkRecord> records) {
        long now = System.currentTimeMillis();
        try {
            for (SinkRecord r : records) {
                out.write(r.topic() + "\t" + r.kafkaPartition() + "\t" + r.kafkaOffset() + "\t" + r.value() + "\t"
                          + now + "\n");
            }
        } catch (IOException e) {
            throw new ConnectException("cannot write", e);
        }
    }

    @Override
    public void flush(Map<TopicPartition, OffsetAndMetadata> offsets) {
        try {
            out.flush();
            file.getChannel().force(false);
        } catch (IOException e) {
            throw new ConnectException("cannot flush", e);
        }
    }

    @Override
    public void close(Collection<TopicPartition> partitions) {
        Events.emit("sink-close", "task", task, "partitions", Events.names(partitions));
    }

    @Override
    public void stop() {
        try {
            if (out != null) {
                out.close();
            }
        } catch (IOException e) {
            throw new ConnectException("cannot close", e);
        }
    }
}
