// The Kafka Streams application of the `streams` chaos scenario (scripts/chaos/streams.py),
// processing.guarantee=exactly_once_v2. Launched as a single source file on the classpath of
// compat/streams/pom.xml (kafka-streams 4.4.0):
//
//   java -cp <classpath> compat/streams/EosStreamsApp.java BOOTSTRAP APP_ID STATE_DIR THREADS [INSTANCE_ID]
//
// INSTANCE_ID: static membership (KIP-345): the main consumers' group.instance.id, which
// Streams suffixes with each thread's index, so an instance started again takes its
// threads' places in the group at once instead of waiting for the old members' sessions
// to end. Without it the members are dynamic.
//
// Input: `orders` (key: order id; value "orderId,customerId,amount"; the record timestamp is
// the event time) and `customers` (key: customer id; value: its region), a table.
// Topology:
//   1. orders re-keyed by customer and repartitioned (the `by-customer` repartition topic);
//   2. joined with the customers table (a KTable, its store restored from its changelog):
//      each order becomes "orderId,customerId,amount,region", written to `enriched`;
//   3. a windowed aggregate: per customer and 1-minute tumbling window (grace 1 day, so no
//      record is late), "count,sum" of the amounts, written to `windowed-totals` keyed
//      "customerId@windowStartMs";
//   4. a state store with its changelog: per region (a second repartition, by region), the
//      running "count,sum", written to `region-totals`.
// Every store is logged (a changelog topic each), so an instance that dies restores them.
//
// Standard output: one JSON event a line: "state" (the application's state changes),
// "restore" (a store partition restored from its changelog: records), "thread-replaced" (an
// uncaught exception: the stream thread is replaced, as production applications configure
// it). Logs go to standard error.

import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.StateRestoreListener;

public final class EosStreamsApp {
    static final int PARTITIONS = 6;

    /** "count,sum" plus one record of ``amount``. */
    static String add(String agg, long amount) {
        int comma = agg.indexOf(',');
        long count = Long.parseLong(agg.substring(0, comma));
        long sum = Long.parseLong(agg.substring(comma + 1));
        return (count + 1) + "," + (sum + amount);
    }

    /** The amount of an enriched order "orderId,customerId,amount,region". */
    static long amount(String enriched) {
        return Long.parseLong(enriched.split(",")[2]);
    }

    static String region(String enriched) {
        return enriched.split(",")[3];
    }

    static StreamsBuilder topology() {
        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, String> customers = builder.table("customers", Consumed.with(Serdes.String(), Serdes.String()),
            Materialized.as("customers-store"));
        KStream<String, String> orders = builder.stream("orders", Consumed.with(Serdes.String(), Serdes.String()));
        KStream<String, String> enriched = orders
            .selectKey((orderId, value) -> value.split(",")[1])
            .repartition(Repartitioned.<String, String>as("by-customer").withNumberOfPartitions(PARTITIONS))
            .join(customers, (order, region) -> order + "," + region);
        enriched.to("enriched", Produced.with(Serdes.String(), Serdes.String()));
        enriched.groupByKey(Grouped.as("by-customer-window"))
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMinutes(1), Duration.ofDays(1)))
            .aggregate(() -> "0,0", (customer, order, agg) -> add(agg, amount(order)),
                Materialized.as("windowed-totals-store"))
            .toStream((window, agg) -> window.key() + "@" + window.window().start())
            .to("windowed-totals", Produced.with(Serdes.String(), Serdes.String()));
        enriched.groupBy((customer, order) -> region(order), Grouped.as("by-region"))
            .aggregate(() -> "0,0", (region, order, agg) -> add(agg, amount(order)),
                Materialized.as("region-totals-store"))
            .toStream()
            .to("region-totals", Produced.with(Serdes.String(), Serdes.String()));
        return builder;
    }

    static synchronized void event(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static final class Restores implements StateRestoreListener {
        @Override
        public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
        }

        @Override
        public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long restored) {
        }

        @Override
        public void onRestoreEnd(TopicPartition tp, String store, long restored) {
            event("{\"event\":\"restore\",\"store\":\"" + store + "\",\"changelog\":\"" + tp + "\",\"records\":"
                + restored + "}");
        }
    }

    public static void main(String[] args) throws InterruptedException {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(args[3]));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        props.put(StreamsConfig.topicPrefix("min.insync.replicas"), 2);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        if (args.length > 4) {
            props.put(StreamsConfig.mainConsumerPrefix("group.instance.id"), args[4]);
        }

        KafkaStreams streams = new KafkaStreams(topology().build(), props);
        streams.setGlobalStateRestoreListener(new Restores());
        streams.setStateListener((now, before) ->
            event("{\"event\":\"state\",\"from\":\"" + before + "\",\"to\":\"" + now + "\"}"));
        streams.setUncaughtExceptionHandler(e -> {
            event("{\"event\":\"thread-replaced\",\"error\":\"" + String.valueOf(e).replace("\"", "'")
                .replace("\\", "/").replace("\n", " ") + "\"}");
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            event("{\"event\":\"closed\"}");
            closed.countDown();
        }));
        streams.start();
        closed.await();
    }
}
