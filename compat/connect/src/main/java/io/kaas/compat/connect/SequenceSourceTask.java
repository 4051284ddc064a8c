package io.kaas.compat.connect;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.source.SourceTask;
import org.apache.kafka.connect.source.TransactionContext;

/** One share of SequenceSource's numbers, paced to `rate` per second. The number is the
 *  record's key and value; the topic's partition is left to the producer (by key). */
public class SequenceSourceTask extends SourceTask {
    private static final long IDLE_MS = 200;

    private String topic;
    private long count;
    private int rate;
    private int batch;
    private int task;
    private int tasks;
    private Map<String, Object> partition;
    private TransactionContext txn;
    private long next;
    private long inTxn;
    private long emitted;
    private long startedNs;
    private boolean done;

    @Override
    public String version() {
        return "1";
    }

    @Override
    public void start(Map<String, String> props) {
        topic = props.get(SequenceSource.TOPIC);
        count = Long.parseLong(props.get(SequenceSource.COUNT));
        rate = Integer.parseInt(props.getOrDefault(SequenceSource.RATE, "500"));
        batch = Integer.parseInt(props.getOrDefault(SequenceSource.BATCH, "100"));
        task = Integer.parseInt(props.get(SequenceSource.TASK));
        tasks = Integer.parseInt(props.get(SequenceSource.TASKS));
        partition = Map.of("task", task);
        Map<String, Object> stored = context.offsetStorageReader().offset(partition);
        next = stored == null ? task : ((Number) stored.get("next")).longValue();
        txn = context.transactionContext();
        startedNs = System.nanoTime();
        Events.emit("source-start", "task", task, "next", next, "stored", stored == null ? "none" : "offset",
                    "boundary", txn == null ? "worker" : "connector");
    }

    @Override
    public List<SourceRecord> poll() throws InterruptedException {
        if (next >= count) {
            if (!done) {
                done = true;
                Events.emit("source-done", "task", task, "next", next);
            }
            Thread.sleep(IDLE_MS);
            return null;
        }
        double elapsed = (System.nanoTime() - startedNs) / 1e9;
        long allowed = Math.min((long) (rate * elapsed) - emitted, Math.max(1, rate / 10));
        if (allowed <= 0) {
            Thread.sleep(Math.max(1, 1000 / rate));
            return null;
        }
        List<SourceRecord> out = new ArrayList<>();
        while (out.size() < allowed && next < count) {
            String v = Long.toString(next);
            next += tasks;
            SourceRecord r = new SourceRecord(partition, Map.of("next", next), topic, null,
                                              Schema.STRING_SCHEMA, v, Schema.STRING_SCHEMA, v);
            out.add(r);
            if (txn != null && (++inTxn >= batch || next >= count)) {
                txn.commitTransaction(r);
                inTxn = 0;
            }
        }
        emitted += out.size();
        return out;
    }

    @Override
    public void stop() {
    }
}
