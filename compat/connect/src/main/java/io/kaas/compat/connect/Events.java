package io.kaas.compat.connect;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;

import org.apache.kafka.common.TopicPartition;

/** One JSON object per line on the worker's standard output, read by
 *  scripts/chaos/connect.py: what each task started from and what it was given. */
final class Events {
    private Events() {
    }

    /** {"event": name, k1: v1, ...}; values are numbers, strings or lists of strings. */
    static void emit(String name, Object... kv) {
        StringBuilder b = new StringBuilder("{\"event\":\"").append(name).append('"');
        for (int i = 0; i + 1 < kv.length; i += 2) {
            b.append(",\"").append(kv[i]).append("\":").append(json(kv[i + 1]));
        }
        System.out.println(b.append('}'));  // println is synchronized: one line per event
    }

    static List<String> names(Collection<TopicPartition> partitions) {
        List<String> out = new ArrayList<>();
        for (TopicPartition tp : partitions) {
            out.add(tp.topic() + "-" + tp.partition());
        }
        return out;
    }

    private static String json(Object v) {
        if (v instanceof Number) {
            return v.toString();
        }
        if (v instanceof Collection<?> c) {
            StringBuilder b = new StringBuilder("[");
            for (Object o : c) {
                b.append(b.length() > 1 ? "," : "").append(json(o));
            }
            return b.append(']').toString();
        }
        return '"' + String.valueOf(v).replace("\\", "\\\\").replace("\"", "\\\"") + '"';
    }
}
